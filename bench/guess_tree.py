"""A GuessNumber policy's exact success: every game tree, weighed by the model's probabilities.

    .venv/bin/python -m bench.guess_tree MODEL_DIR [MODEL_DIR ...] [--low 1 --high 8 --turns 3]

Sampled evaluations of 200 episodes have a 95% interval of about +-7 points; this one has
none. For every target it walks the whole tree of valid guesses (each reply ``"k"`` for k in
the range, its probability at temperature 1 read off the model with the rollout server's own
token layout) through the real env (``strict``, ``feedback="range"``: the built-in rules),
and sums the probability of the branches that find the number. Any other reply is counted
as a loss (its share is printed: the tree is exact when it is near 0). It also prints the
opening's distribution and, per target, the most likely game: what the policy *is*, which
held-out success alone does not say (docs/training.md uses it to read runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import Any

import gymnasium
import torch
from transformers import AutoModelForCausalLM

from rollgym.envs.messages import Message, assistant
from rollgym.run.demos import GUESS_RULES
from rollgym.run.warmstart import tokenize_conversation
from rollgym.server.conversation.codec import ChatCodec


@dataclasses.dataclass
class Tree:
    """A policy's exact play: success, opening distribution, invalid share, likely games."""

    success: float
    per_target: dict[int, float]
    opening: dict[int, float]
    invalid: float  # probability mass of replies that are no number in the range
    likely: dict[int, list[int]]  # target -> the most likely guesses, in order


class GuessTree:
    """Reply probabilities of one model in the server's layout, and the trees they make."""

    def __init__(self, model_dir: Path, low: int, high: int, turns: int, rules: dict[str, Any]):
        self.codec = ChatCodec.from_model_dir(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()
        self.low, self.high, self.turns = low, high, turns
        self.env = gymnasium.make(
            "rollgym/GuessNumber-v0", low=low, high=high, max_episode_steps=turns, **rules
        )

    def replies(self, history: list[Message]) -> dict[int, float]:
        """P(reply = "k") for each k in the range, given the conversation so far."""
        rows = [
            tokenize_conversation(self.codec, [*history, assistant(str(k))])
            for k in range(self.low, self.high + 1)
        ]
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows])
        with torch.no_grad():
            logps = self.model(ids).logits.log_softmax(-1)
        out = {}
        for k, row, logp in zip(range(self.low, self.high + 1), rows, logps, strict=True):
            end = len(row["input_ids"])
            start = end - len(self.codec.encode(str(k))) - 1  # the reply's tokens and its eos
            out[k] = math.exp(
                sum(float(logp[i - 1, row["input_ids"][i]]) for i in range(start, end))
            )
        return out

    def walk(self, target: int) -> tuple[float, float, list[int]]:
        """(P(found), P(an invalid reply), the most likely game) for one target."""
        found = invalid = 0.0
        best: tuple[float, list[int]] = (0.0, [])

        def visit(guesses: list[int], p: float) -> None:
            nonlocal found, invalid, best
            history, done = self._replay(target, guesses)
            if done:
                found += p if guesses and guesses[-1] == target else 0.0
                if p > best[0]:
                    best = (p, guesses)
                return
            probs = self.replies(history)
            invalid += p * max(0.0, 1.0 - sum(probs.values()))
            for k, q in probs.items():
                visit([*guesses, k], p * q)

        visit([], 1.0)
        return found, invalid, best[1]

    def _replay(self, target: int, guesses: list[int]) -> tuple[list[Message], bool]:
        observation, _ = self.env.reset(options={"task_id": f"guess-{target}"})
        history = list(observation)
        for guess in guesses:
            observation, _, terminated, truncated, _ = self.env.step(str(guess))
            history += [assistant(str(guess)), *observation]
            if terminated or truncated:
                return history, True
        return history, False

    def tree(self) -> Tree:
        targets = range(self.low, self.high + 1)
        walks = {t: self.walk(t) for t in targets}
        opening_history, _ = self._replay(self.low, [])
        return Tree(
            success=sum(w[0] for w in walks.values()) / len(walks),
            per_target={t: w[0] for t, w in walks.items()},
            opening=self.replies(opening_history),
            invalid=sum(w[1] for w in walks.values()) / len(walks),
            likely={t: w[2] for t, w in walks.items()},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dirs", type=Path, nargs="+")
    parser.add_argument("--low", type=int, default=1)
    parser.add_argument("--high", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for model_dir in args.model_dirs:
        tree = GuessTree(model_dir, args.low, args.high, args.turns, dict(GUESS_RULES)).tree()
        opening = " ".join(f"{k}:{p:.2f}" for k, p in tree.opening.items())
        print(
            f"{model_dir}\n  exact success {tree.success:.3f}, invalid replies {tree.invalid:.3f}"
        )
        print(f"  opening  {opening}")
        for target, p in tree.per_target.items():
            print(f"  target {target}: {p:.2f}, most likely game {tree.likely[target]}")


if __name__ == "__main__":
    main()
