"""reasoning-gym's procedural tasks, served unchanged: ``reasoning_gym/<task>`` env ids.

reasoning-gym (PyPI, Apache-2.0) generates reasoning tasks procedurally from a seed (chain
sums, letter counting, sorting, puzzles...: ``reasoning_gym.factory.DATASETS``) and scores an
answer with each task's own ``score_answer``. This adapter makes every task a single-turn
rollgym chat env, without changing the task:

    system     reasoning-gym's own system prompt (answer between <answer> and </answer>)
    user       the task's question
    assistant  ... <answer>-14282</answer>

The reward is the task's score (0.0 to 1.0) of the answer between the tags, or of the whole
message when it has none (``reasoning_gym.utils.extract_answer``). A success is a score of
1.0. A scorer that cannot parse the answer (some raise ``ValueError`` on text that is not a
number) scores it 0.0, as a wrong answer: the agent wrote it; any other exception of the
scorer is a crash of the task, an infrastructure failure. Items are numbered: ``reset(seed=n)`` poses item ``n`` of the task's dataset (made from
``dataset_seed``), so disjoint seeds pose disjoint items, and ``options={"task_id":
"<task>-<n>"}`` picks one by name. ``config`` passes the task's own settings
(``{"min_terms": 2, "max_terms": 3}`` for chain_sum, ...).

Registration: ``register()`` adds every task under the ``reasoning_gym/`` namespace but
those in ``NOT_SERVED`` (with the reason); it is a ``rollgym.envs`` entry point of this
package, so ``rollgym.envs.make`` and the server find the ids by themselves. With
reasoning-gym not installed, nothing is registered.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import gymnasium

from rollgym.envs.core import ChatEnv, Opening, Turn
from rollgym.envs.errors import TaskNotFound
from rollgym.envs.messages import system, user

NAMESPACE = "reasoning_gym"
NOT_SERVED = {
    "composite": "a mix of other tasks; it needs a config that names them",
    "list_functions": "its items are not reproducible from the seed (in 0.1.25, 5 of 50 "
    "items changed between two reads of the same index)",
}


@dataclasses.dataclass(frozen=True)
class Answer:
    """The agent's answer and the task's score of it."""

    text: str
    score: float


def score_of(answer: Answer) -> float:
    return answer.score


def no_step_reward(answer: Answer) -> float:
    return 0.0


class ReasoningGymEnv(ChatEnv[Answer, Answer]):
    """One reasoning-gym task as a single-turn chat env; see the module docstring."""

    def __init__(
        self,
        *,
        task: str,
        config: dict[str, Any] | None = None,
        size: int = 100_000,
        dataset_seed: int = 0,
        system_prompt: str = "default",
    ):
        from reasoning_gym.utils import SYSTEM_PROMPTS

        if system_prompt not in SYSTEM_PROMPTS:
            raise ValueError(f"system_prompt must be one of {sorted(SYSTEM_PROMPTS)}")
        super().__init__(step_reward=no_step_reward, terminal_reward=score_of)
        self.task, self.size = task, size
        self._dataset = _dataset(task, dataset_seed, size, json.dumps(config or {}, sort_keys=True))
        self._system = SYSTEM_PROMPTS[system_prompt]
        self._entry: dict[str, Any] = {}
        self._answer = Answer("", 0.0)

    def _open(self, options: dict[str, Any]) -> Opening:
        index = self._index(options)
        self._entry = self._dataset[index]
        self._answer = Answer("", 0.0)
        return Opening(
            task_id=f"{self.task}-{index}",
            messages=(system(self._system), user(str(self._entry["question"]))),
        )

    def _index(self, options: dict[str, Any]) -> int:
        if "task_id" in options:
            name, _, number = str(options["task_id"]).rpartition("-")
            if name != self.task or not number.isdigit() or int(number) >= self.size:
                raise TaskNotFound(
                    f"no task {options['task_id']!r} in {self.task} (0..{self.size - 1})"
                )
            return int(number)
        return int(self.np_random.integers(self.size))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Item ``seed`` (modulo the dataset size) when seeded, as the module docstring says."""
        return super().reset(seed=seed, options=self._item_of(seed, options))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return await super().areset(seed=seed, options=self._item_of(seed, options))

    def _item_of(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any]:
        if seed is None or (options or {}).get("task_id"):
            return dict(options or {})
        return {**(options or {}), "task_id": f"{self.task}-{seed % self.size}"}

    def _turn(self, action: str) -> Turn[Answer]:
        from reasoning_gym.utils import extract_answer

        extracted = extract_answer(action)
        text = extracted if extracted is not None else action.strip()
        try:
            score = float(self._dataset.score_answer(answer=text, entry=self._entry))
        except (ValueError, TypeError):  # an answer the scorer cannot parse is a wrong one
            score = 0.0
        self._answer = Answer(text, score)
        return Turn((), self._answer, terminated=True)

    def _rejected(self, error: str) -> Answer:
        return Answer("", 0.0)

    def _episode(self) -> Answer:
        return self._answer


@functools.cache
def _dataset(task: str, seed: int, size: int, config: str) -> Any:
    """reasoning-gym's dataset object (items are made on access, from the seed); one per
    task and settings in a process, however many envs use it."""
    import reasoning_gym

    return reasoning_gym.create_dataset(task, seed=seed, size=size, **json.loads(config))


def task_names() -> list[str]:
    """Every reasoning-gym task; empty when reasoning-gym is not installed.

    The package is imported first, not ``reasoning_gym.factory`` alone: the tasks enter
    ``DATASETS`` while the package's ``__init__`` runs, and a thread that imports the
    submodule meanwhile (the server makes envs in threads) would read it half filled,
    where importing the package waits for that ``__init__`` to finish.
    """
    try:
        import reasoning_gym.factory
    except ImportError:
        return []
    return sorted(set(reasoning_gym.factory.DATASETS) - set(NOT_SERVED))


def register() -> None:
    """Register ``reasoning_gym/<task>`` for every task (idempotent); see the module docstring."""
    for task in task_names():
        env_id = f"{NAMESPACE}/{task}"
        if env_id not in gymnasium.registry:
            gymnasium.register(
                id=env_id,
                entry_point="rollgym.envs.reasoning_gym:ReasoningGymEnv",
                kwargs={"task": task},
            )
