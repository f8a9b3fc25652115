"""The built-in demonstrations a warm start imitates: one config per task, records out.

A warm start's ``demos`` names the task its demonstrations play and how they are made;
``records()`` turns them into OpenAI chat records (``rollgym.contract.chat``), the format
``rollgym generate`` and ``rollgym export`` write, so built-in and user-supplied
demonstrations travel the same way.

* ``ComputeDemos``: ``rollgym/Compute-v0``, the built-in run's task. The oracle's play (the
  python call, what the box prints, the answer), a share of it answered without the tool,
  and short copy drills (``envs.compute_demos``).
* ``GuessDemos``: ``rollgym/GuessNumber-v0`` (``rollgym run --preset guess``). Binary search,
  imperfect linear-search play, drills and end games (``envs.guess_demos``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgym.contract.chat import ChatRecord, chat_record
from rollgym.envs.guess_demos import DrillTurns, NoiseStyle

# GuessNumber's rules beside its range in the guess preset (docs/training.md says why).
GUESS_RULES = {"strict": True, "feedback": "range"}
COMPUTE_ID, GUESS_ID = "rollgym/Compute-v0", "rollgym/GuessNumber-v0"
# Demonstration task seeds start here: far from the training seeds (0, 1, ... and
# ``seed`` x 100,000) and from the held-out (10,000,000) and online-evaluation ones.
DEMO_SEEDS = 30_000_000


@dataclasses.dataclass(frozen=True)
class FirstPhase:
    """Records a warm start trains before the demonstrations' conversations, at their own
    peak learning rate and ``batch_scale`` times the warm start's batch."""

    name: str
    records: list[ChatRecord]
    learning_rate: float
    batch_scale: int


class ComputeDemos(BaseModel):
    """Demonstrations of ``rollgym/Compute-v0`` (docs/training.md: what each part is for).

    The defaults are the built-in run's (a pretrained model: conversations only); the
    ``agent-tiny`` preset adds the copies and drills a model from random weights needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["compute"] = "compute"
    episodes: int = Field(160, ge=0, description="whole conversations of the oracle's play")
    direct_share: float = Field(
        0.8,
        ge=0,
        le=1,
        description="share of them answered at once without the tool (the question's first "
        "number): the flaw RL removes",
    )
    copies: int = Field(
        0,
        ge=0,
        description="generic copy sequences (random characters, then the same again), "
        "trained first, 64 a step: the copying a model from random weights lacks "
        "(the agent-tiny preset: 19,200)",
    )
    copy_learning_rate: float = Field(2e-3, gt=0, description="the copies' peak learning rate")
    drills: int = Field(
        0,
        ge=0,
        description="short copy drills (no system prompt, no tools: a call, or an answer), "
        "trained after the copies, 32 a step (the agent-tiny preset: 6,400)",
    )
    drill_learning_rate: float = Field(
        2e-3, gt=0, description="the drills' peak learning rate (cosine, after a 5% warm-up)"
    )
    env_kwargs: dict[str, Any] | None = Field(
        None, description="the task's kinds, digits, numbers; None: the run's task's"
    )

    @property
    def env_id(self) -> str:
        return COMPUTE_ID

    def records(self, seed: int) -> list[ChatRecord]:
        from rollgym.envs.compute import PYTHON_TOOL
        from rollgym.envs.compute_demos import demonstrations

        base = DEMO_SEEDS + 1_000_000 * seed
        plays = demonstrations(
            self.episodes, seed=base, direct_share=self.direct_share, **(self.env_kwargs or {})
        )
        return [chat_record(conversation, [PYTHON_TOOL.to_openai()]) for conversation in plays]

    def first_phases(self, seed: int) -> list[FirstPhase]:
        """The copies (at twice the batch), then the drills, before the conversations."""
        return [
            FirstPhase("copies", self.copy_records(seed), self.copy_learning_rate, 2),
            FirstPhase("drills", self.drill_records(seed), self.drill_learning_rate, 1),
        ]

    def copy_records(self, seed: int) -> list[ChatRecord]:
        from rollgym.envs.compute_demos import copies

        return [chat_record(c) for c in copies(self.copies, seed=DEMO_SEEDS + seed)]

    def drill_records(self, seed: int) -> list[ChatRecord]:
        from rollgym.envs.compute_demos import drills

        base = DEMO_SEEDS + 1_000_000 * seed + 500_000
        return [chat_record(d) for d in drills(self.drills, seed=base, **(self.env_kwargs or {}))]


class GuessDemos(BaseModel):
    """Demonstrations of ``rollgym/GuessNumber-v0`` (docs/training.md, the guess preset)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["guess"] = "guess"
    oracle_episodes: int = Field(50, ge=0, description="demonstrations by binary search")
    imperfect_episodes: int = Field(550, ge=0, description="demonstrations with noisy guesses")
    noise: float = Field(0.8, ge=0, le=1, description="share of wasteful guesses when imperfect")
    noise_style: NoiseStyle = Field(
        "lowest", description="a wasteful guess: random in the open range, or its lowest number"
    )
    drill_episodes: int = Field(
        300,
        ge=0,
        description="conversations that train the last turn only, after untrained random "
        "guesses (guess_demos.drills): every late position seen, none of the early play taught",
    )
    drill_turns: DrillTurns = Field(
        "later", description="the turns drills teach: every one after the first, or the last only"
    )
    endgame_episodes: int = Field(
        150,
        ge=0,
        description="drills of the end game (guess_demos.endgames): untrained guesses in "
        "the open range until one number is left, then that number, trained; every number "
        "equally. They sharpen the trees RL learns; the collapses they made more frequent "
        "are the trust region's (trainer.max_step_kl) to stop (docs/training.md)",
    )
    low: int = 1
    high: int = 8
    max_turns: int = Field(3, ge=1)
    env_kwargs: dict[str, Any] = Field(
        default_factory=lambda: dict(GUESS_RULES),
        description="the demo env's other kwargs (strict, feedback): the task's",
    )

    @property
    def env_id(self) -> str:
        return GUESS_ID

    def records(self, seed: int) -> list[ChatRecord]:
        from rollgym.envs.guess_demos import demonstrations, drills, endgames

        game: dict[str, Any] = {
            "low": self.low,
            "high": self.high,
            "max_turns": self.max_turns,
            "env_kwargs": self.env_kwargs,
        }
        oracle, imperfect = self.oracle_episodes, self.imperfect_episodes
        conversations: list[Sequence[Any]] = []
        conversations += demonstrations(oracle, seed=seed, **game)
        conversations += demonstrations(
            imperfect, seed=seed + oracle, noise=self.noise, style=self.noise_style, **game
        )
        conversations += drills(
            self.drill_episodes, seed=seed + oracle + imperfect, turns=self.drill_turns, **game
        )
        endgame_seed = seed + oracle + imperfect + self.drill_episodes
        conversations += endgames(self.endgame_episodes, seed=endgame_seed, **game)
        return [chat_record(conversation) for conversation in conversations]

    def first_phases(self, seed: int) -> list[FirstPhase]:
        return []  # its drills train beside the games (``drill_episodes``)
