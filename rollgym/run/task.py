"""What a ``rollgym run`` trains on: the env (or a mixture of envs), its seeds, sampling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rollgym.contract.wire import CurriculumSettings, MixedEnv, distinct_env_ids
from rollgym.run.demos import GUESS_ID, GUESS_RULES
from rollgym.trainer.errors import TrainerConfigError

TASK_FILE = "task.json"


class TaskConfig(BaseModel):
    """What the rollout job samples: the environment, its difficulty, sampling."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_id: str = GUESS_ID
    env_kwargs: dict[str, Any] = Field(default_factory=lambda: {"low": 1, "high": 8, **GUESS_RULES})
    max_turns: int = Field(3, ge=1)
    max_tokens: int = Field(8, ge=1, description="per model turn")
    temperature: float = Field(1.0, gt=0)
    sandboxes: int = Field(
        0,
        ge=0,
        description="the server's warm pool of boxes for sandboxed envs (0: none); an "
        "episode holds one from its reset to its end",
    )
    max_boxes: int = Field(
        0,
        ge=0,
        description="for envs whose tasks bring their own images (harbor/...): the cap on "
        "boxes of all images at once, warm per image (0: the default image only)",
    )
    weight: float = Field(1.0, gt=0, description="env_id's share of the groups in a mixture")
    mixture: list[MixedEnv] = Field(
        default_factory=list,
        description="more envs trained in the same run: each group plays one, drawn by weight; "
        "each is evaluated apart",
    )

    seed_pool: int | None = Field(
        None, ge=1, le=100_000, description="train on this many task seeds, cycled; None: new ones"
    )
    curriculum: CurriculumSettings | None = Field(
        None,
        description="play less the seeds whose recent groups were all solved or all failed "
        "(needs seed_pool); None: uniform",
    )

    @model_validator(mode="after")
    def _curriculum_on_a_pool(self) -> TaskConfig:
        if self.curriculum is not None and self.seed_pool is None:
            raise ValueError(
                "a curriculum needs task.seed_pool (--seed-pool N): tasks must come back to "
                "be played less"
            )
        return self

    @model_validator(mode="after")
    def _envs_differ(self) -> TaskConfig:
        distinct_env_ids([self.env_id, *(part.env_id for part in self.mixture)])
        return self

    def envs(self) -> list[MixedEnv]:
        """Every env the run trains on, ``env_id``'s first."""
        first = MixedEnv(
            env_id=self.env_id,
            env_kwargs=self.env_kwargs,
            max_turns=self.max_turns,
            weight=self.weight,
        )
        return [first, *self.mixture]

    def sandbox_settings(self) -> dict[str, str]:
        """The server settings (environment variables) of the boxes the task needs."""
        return {
            "ROLLGYM_SANDBOXES__POOL_SIZE": str(self.sandboxes),
            "ROLLGYM_SANDBOXES__MAX_BOXES": str(self.max_boxes),
        }


def claim_run_dir(run_dir: Path, task: TaskConfig) -> None:
    """Refuse to resume a run dir that holds another task's run, then mark it with ``task``.

    Resuming would train the new task from the old one's checkpoints and report a mix (a
    run dir of GuessNumber, the built-in run before the tool task, is the likely one). The
    envs are what must match (ids, kwargs, the mixture); a run may change its sampling or
    boxes. A run dir from before the marker is read from its ``summary.json``.
    """
    marker, summary = run_dir / TASK_FILE, run_dir / "summary.json"
    held: dict[str, Any] | None = None
    if marker.is_file():
        held = json.loads(marker.read_text())
    elif summary.is_file():
        held = json.loads(summary.read_text()).get("config", {}).get("task")
    now = task.model_dump(mode="json")
    if held is not None:
        envs = ("env_id", "env_kwargs", "mixture")
        if [held.get(k) or None for k in envs] != [now.get(k) or None for k in envs]:
            raise TrainerConfigError(
                f"{run_dir} holds a run of {held['env_id']}, not {task.env_id}: add --restart "
                "to start this task over there, or give it its own --run-dir"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(now, indent=2))
