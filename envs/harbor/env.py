"""``HarborEnv``: a folder of Harbor task directories as one Gymnasium env (``harbor/Tasks-v0``).

Each episode is one task of ``tasks_dir`` (``reset(options={"task_id": name})`` or drawn
with the env's seed), played in a box of the task's own image (``rollgym tasks build``;
``envs.harbor.image``) from the shared ``ImagePool``, so boxes of a task seen recently
are warm:

1. the agent gets a system prompt and the task's ``instruction.md``, in its working
   directory holding the task's starting files (the Dockerfile's ``WORKDIR``, ``/app``
   say, which is the box's ``/work``);
2. each reply runs one ```` ```bash ```` block as the agent (timeout ``command_timeout_s``,
   never past the task's time) and shows its output; ``<done/>`` says the task is done;
3. the episode ends when the agent says so, or when it has used the task's turns
   (``[metadata] max_turns``, else ``max_turns``) or its time in the box (``[agent]
   timeout_sec``): then the task's ``tests/`` run as the verifier (``Sandbox.grade``:
   every agent process killed first, the tests copied into ``/tests``, a folder the agent
   could never enter, ``test.sh`` run as another user) and the reward is the number the
   tests wrote to ``/logs/verifier/reward.txt`` or ``reward.json``, read on the host
   (``envs.harbor.reward``). That step is ``terminated`` and pays the reward.

A verifier that runs past ``[verifier] timeout_sec`` or writes no usable reward is an
infrastructure failure of the episode (``info["failure"] == "infra"``, excluded from
training and counted), never a reward of 0. The agent never sees ``tests/`` or
``solution/``: neither is in the image, and the tests enter the box only after the agent
is gone. ``max_episode_steps`` of the registration (50) is the runner's cap and truncates
without grading; the task's own limits end the episode graded, as Harbor does.

Reward: the verifier's number on the last step; a rejected message costs
``invalid_penalty`` (``VerifiedStepReward``).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from rollgym.envs.box_kinds import default_kinds_pool, kind_pool
from rollgym.envs.core import Opening, Turn
from rollgym.envs.errors import ActionError, TaskNotFound
from rollgym.envs.harbor.image import SEED_DIR, VERIFIER_DIRS, image_tag
from rollgym.envs.harbor.reward import VerifierFailed, reward_of
from rollgym.envs.harbor.task import HarborTask, TaskFormatError, read_tasks, task_files
from rollgym.envs.messages import clip_text, system, user
from rollgym.envs.parsing import code_blocks, extract_code
from rollgym.envs.programs import Program, RunShell, grade
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.verified import VerifiedEpisode, VerifiedStep, VerifiedStepReward, VerifierScore
from rollgym.sandboxes.base import WORK_DIR, Grading, SandboxPool
from rollgym.sandboxes.config import SandboxConfig

SYSTEM_PROMPT = (
    "You are in a Linux shell, in your working directory, where the task's files are. "
    "Each reply runs one ```bash code block in a fresh shell (files persist between "
    "replies, the current directory and variables do not) and shows you its output. "
    "When the task is done, reply <done/>."
)
DONE = re.compile(r"<done\s*/>")
REWARD_JSON = "/logs/verifier/reward.json"
REWARD_TXT = "/logs/verifier/reward.txt"
GRADE_COMMAND = "mkdir -p /logs/verifier /logs/agent && /tests/test.sh"
MIN_COMMAND_S = 0.5


def task_box(task: HarborTask, image: str, base: SandboxConfig) -> SandboxConfig:
    """The box of ``task``: its image, its limits from task.toml, its seed and the
    verifier's folders; ``TaskFormatError`` when its memory cannot hold a box."""
    changes: dict[str, Any] = {
        "image": image,
        "seed_dir": SEED_DIR,
        "verifier_dirs": VERIFIER_DIRS,
    }
    if task.memory_mb is not None:
        memory = task.memory_mb
        changes.update(
            memory_mb=memory,
            work_dir_mb=max(16, memory // 4),
            tmp_dir_mb=max(16, memory // 8),
            shm_mb=max(8, memory // 16),
            verifier_dir_mb=max(4, min(16, memory // 32)),
        )
    if task.cpus is not None:
        changes["cpus"] = min(task.cpus, float(os.cpu_count() or 1))
    try:
        return base.with_overrides(**changes)
    except ValueError as exc:
        raise TaskFormatError(f"task {task.name}: its box cannot be made: {exc}") from exc


class HarborEnv(SandboxEnv[VerifiedStep, VerifiedEpisode]):
    """Harbor tasks in their own images; see the module docstring.

    ``tasks_dir``: a folder of task directories, or one task directory; ``task`` keeps
    one task of it (one env id per task: ``register_tasks``). ``box``: settings of every
    task's box (``SandboxConfig`` fields; the task's image, memory and cpus win).
    """

    def __init__(
        self,
        *,
        tasks_dir: str | Path,
        task: str | None = None,
        sandbox_pool: SandboxPool | None = None,
        box: dict[str, Any] | None = None,
        max_turns: int = 20,
        max_verifier_s: float = 600.0,
        step_reward: Callable[[VerifiedStep], float] | None = None,
        terminal_reward: Callable[[VerifiedEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        super().__init__(
            step_reward=step_reward or VerifiedStepReward(),
            terminal_reward=terminal_reward or VerifierScore(),
            sandbox_pool=sandbox_pool,
            **options,
        )
        tasks = read_tasks(tasks_dir)
        if task is not None:
            tasks = tuple(t for t in tasks if t.name == task)
            if not tasks:
                raise TaskFormatError(f"{tasks_dir} has no task {task!r}")
        if max_turns < 1 or max_verifier_s <= 0:
            raise ValueError("max_turns must be at least 1 and max_verifier_s positive")
        self.tasks = tasks
        self.max_turns = max_turns
        self.max_verifier_s = max_verifier_s
        base = SandboxConfig(**(box or {}))
        self.boxes = {t.name: task_box(t, image_tag(t), base) for t in tasks}
        self._tests = {t.name: dict(task_files(t.tests_dir)) for t in tasks}
        self._views: dict[str, SandboxPool] = {}
        self._task = tasks[0]
        self._spent = 0.0
        self._reward = 0.0

    @property
    def task(self) -> HarborTask:
        """The task of the current (or last) episode."""
        return self._task

    # --- the task's box --------------------------------------------------------------------

    def _open(self, options: dict[str, Any]) -> Opening:
        self._task = self._choose(options)
        return super()._open(options)

    async def _aopen(self, options: dict[str, Any]) -> Opening:
        self._task = self._choose(options)
        if self._pool is None:
            self._pool = await asyncio.to_thread(default_kinds_pool)
        return await super()._aopen(options)

    def _choose(self, options: dict[str, Any]) -> HarborTask:
        wanted = options.get("task_id")
        if wanted is None:
            return self.tasks[int(self.np_random.integers(len(self.tasks)))]
        for task in self.tasks:
            if task.name == wanted:
                return task
        raise TaskNotFound(f"no task {wanted!r}; tasks: {[t.name for t in self.tasks][:20]}")

    def _sandbox_pool(self) -> SandboxPool:
        """The pool of the current task's boxes: a view of the shared ``ImagePool``."""
        if self._pool is None:
            self._pool = default_kinds_pool()
        view = self._views.get(self._task.name)
        if view is None:
            box = self.boxes[self._task.name]
            view = self._views[self._task.name] = kind_pool(
                self._pool, box, needed_by="Harbor tasks"
            )
        return view

    async def _asandbox_pool(self) -> SandboxPool:
        return self._sandbox_pool()

    # --- the episode -----------------------------------------------------------------------

    def _open_program(self, options: dict[str, Any]) -> Program[Opening]:
        self._spent, self._reward = 0.0, 0.0
        yield from ()  # the box starts with the task's files: nothing to set up
        return Opening(self._task.name, (system(SYSTEM_PROMPT), user(self._task.instruction)))

    def _turn_program(self, action: str) -> Program[Turn[VerifiedStep]]:
        try:
            return (yield from self._act(action))
        except ActionError as exc:
            if self._used_up() is None:
                raise
            error = str(exc)  # a rejected last message: the task's tests still decide
            return (yield from self._graded(error, VerifiedStep(valid=False), error))

    def _act(self, action: str) -> Program[Turn[VerifiedStep]]:
        done = DONE.search(action) is not None
        if done and code_blocks(action):
            raise ActionError("Either run one ```bash block or reply <done/>, not both.")
        if done:
            return (yield from self._graded("You said the task is done."))
        try:
            command = extract_code(action, languages=("bash", "sh", "shell", "console"))
        except ActionError as exc:
            raise ActionError(f"{exc} When the task is done, reply <done/>.") from None
        timeout = self._command_timeout()
        run = yield from self.agent_command(RunShell(command, timeout))
        self._spent += run.result.duration_s if run.result is not None else timeout
        feedback = run.describe(self.max_feedback_chars)
        used_up = self._used_up()
        if used_up is not None:
            return (yield from self._graded(f"{feedback}\nYour {used_up} is up."))
        error = run.problem if run.result is None else None
        if run.result is not None and not run.result.ok:
            error = f"the command exited with code {run.result.exit_code}"
        return Turn(
            (user(clip_text(feedback, self.max_feedback_chars + 100)),),
            VerifiedStep(),
            failure="task" if error else None,
            error=error,
        )

    def _graded(
        self, before: str, step: VerifiedStep | None = None, error: str | None = None
    ) -> Program[Turn[VerifiedStep]]:
        """Run the task's tests as the verifier; the episode ends with their reward."""
        grading = Grading(
            command=GRADE_COMMAND,
            files={
                f"/tests/{name}": path.read_bytes()
                for name, path in self._tests[self._task.name].items()
            },
            read=(REWARD_JSON, REWARD_TXT),
            cwd=WORK_DIR,
            timeout=min(self._task.verifier_timeout_s, self.max_verifier_s),
            environment=self._task.verifier_env,
        )
        graded = yield from grade(grading)
        if graded.timed_out:
            raise VerifierFailed(
                f"task {self._task.name}: the verifier ran past its {grading.timeout:g} s"
            )
        try:
            self._reward = reward_of(
                {"reward.json": graded.files[REWARD_JSON], "reward.txt": graded.files[REWARD_TXT]}
            )
        except VerifierFailed as exc:
            tail = clip_text(graded.output.strip(), 500)
            raise VerifierFailed(
                f"task {self._task.name}: {exc} (test.sh exited {graded.exit_code}; output: {tail!r})"
            ) from None
        text = clip_text(before, self.max_feedback_chars + 100)
        return Turn(
            (user(f"{text}\nThe task's tests ran: reward {self._reward:g}."),),
            step or VerifiedStep(),
            terminated=True,
            failure="task" if error else None,
            error=error,
        )

    def _command_timeout(self) -> float:
        limit = self._task.agent_timeout_s
        if limit is None:
            return self.command_timeout_s
        return max(MIN_COMMAND_S, min(self.command_timeout_s, limit - self._spent))

    def _used_up(self) -> str | None:
        if self.turns >= (self._task.max_turns or self.max_turns):
            return "turn limit"
        limit = self._task.agent_timeout_s
        if limit is not None and self._spent >= limit:
            return f"time ({limit:g} s)"
        return None

    def _rejected(self, error: str) -> VerifiedStep:
        return VerifiedStep(valid=False)

    def _episode(self) -> VerifiedEpisode:
        return VerifiedEpisode(self._reward)
