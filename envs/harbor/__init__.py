"""Harbor task directories as environments: ``harbor/Tasks-v0`` and one id per task.

- ``task``: the format, read and checked once (``read_tasks``, ``TaskFormatError``);
- ``image``: each task's image name (by content), what rollgym adds to its Dockerfile,
  its ``FROM`` images;
- ``env``: ``HarborEnv``, a shell in the task's box, graded by the task's tests as the
  verifier once the agent is done; ``reward``: the verifier's reward file, read on the host;
- ``oracle``: the task's oracle and a do-nothing agent (``rollgym tasks check``).

``register()`` (run through the ``rollgym.envs`` entry point, so ``rollgym.envs.make``
finds it) registers ``harbor/Tasks-v0``, made with ``tasks_dir=``;
``register_tasks(folder)`` registers ``harbor/<task>-v0`` for each task of a folder (the
``harbor/`` namespace: these ids need a folder of tasks to be made, so they stay out of
the conformance test over ``rollgym/``, which makes every env with no arguments)::

    from rollgym.envs.harbor import register_tasks
    register_tasks("examples/tasks")        # harbor/count-words-v0, ...
    env = rollgym.envs.make("harbor/count-words-v0", sandbox_pool=image_pool)

Images come from ``rollgym tasks build DIR``; boxes from an ``ImagePool``
(``rollgym.sandboxes.image_pool``). docs/environments.md has the whole story.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium

from rollgym.envs.harbor.task import HarborTask, TaskFormatError, read_task, read_tasks

ENV_ID = "harbor/Tasks-v0"
ENTRY_POINT = "rollgym.envs.harbor.env:HarborEnv"
MAX_EPISODE_STEPS = 50  # the runner's cap; a task's own limits end it graded before


def register() -> None:
    """Register ``harbor/Tasks-v0`` (idempotent)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point=ENTRY_POINT, max_episode_steps=MAX_EPISODE_STEPS)


def register_tasks(folder: str | Path, namespace: str = "harbor") -> list[str]:
    """Register ``<namespace>/<task>-v0`` for every task of ``folder``; return the ids."""
    ids = []
    for task in read_tasks(folder):
        env_id = f"{namespace}/{task.name}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(
                env_id,
                entry_point=ENTRY_POINT,
                max_episode_steps=MAX_EPISODE_STEPS,
                kwargs={"tasks_dir": str(task.path), "task": task.name},
            )
        ids.append(env_id)
    return ids


__all__ = [
    "ENV_ID",
    "HarborTask",
    "TaskFormatError",
    "read_task",
    "read_tasks",
    "register",
    "register_tasks",
]
