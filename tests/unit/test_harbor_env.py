"""``HarborEnv``'s episode logic on a scripted box: commands, ``<done/>``, the task's turn
and time limits, the verifier's reward, and its failures as infrastructure failures. The
scripted box is a fake for this tier only; the real twin is ``rollgym tasks check`` over
the examples in real boxes (tests/docker/test_harbor_docker.py)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from rollgym.envs.errors import InfraError
from rollgym.envs.harbor import register, register_tasks
from rollgym.envs.harbor.env import HarborEnv
from rollgym.envs.harbor.image import image_tag
from rollgym.envs.harbor.oracle import do_nothing, oracle
from rollgym.envs.harbor.task import read_task
from rollgym.sandboxes.base import ExecResult, Graded, Grading, SandboxTimeout
from rollgym.sandboxes.config import SandboxConfig

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


@dataclasses.dataclass
class ScriptedBox:
    """Answers every command with ``output``; a grading with ``graded``."""

    graded: Graded
    seconds: float = 0.5
    commands: list[str] = dataclasses.field(default_factory=list)
    gradings: list[Grading] = dataclasses.field(default_factory=list)
    id: str = "scripted"

    def run_shell(self, command, *, timeout=None, stdin=None) -> ExecResult:
        self.commands.append(command)
        if "sleep" in command:
            raise SandboxTimeout("timed out", ExecResult("", "", 137, timeout, timeout))
        return ExecResult("out\n", "", 0, self.seconds, self.seconds)

    def grade(self, grading: Grading) -> Graded:
        self.gradings.append(grading)
        return self.graded


class ScriptedKinds:
    """A pool of many kinds (``for_box``) that hands out one scripted box."""

    def __init__(self, box: ScriptedBox) -> None:
        self.box = box
        self.kinds: list[SandboxConfig] = []

    def for_box(self, config: SandboxConfig):
        self.kinds.append(config)
        return self

    def acquire(self, *, timeout=None):
        return self.box

    def release(self, sandbox) -> None:
        pass

    def close(self) -> None:
        pass


def graded(reward: bytes | None, *, timed_out=False, json: bytes | None = None) -> Graded:
    files = {"/logs/verifier/reward.txt": reward, "/logs/verifier/reward.json": json}
    return Graded(exit_code=0, timed_out=timed_out, duration_s=0.1, output="", files=files)


def make(box: ScriptedBox, task: str = "count-words", **kwargs) -> gymnasium.Env:
    register()
    pool = ScriptedKinds(box)
    return gymnasium.make(
        "harbor/Tasks-v0", tasks_dir=str(EXAMPLES / task), sandbox_pool=pool, **kwargs
    )


def test_a_command_then_done_is_graded_by_the_tests() -> None:
    box = ScriptedBox(graded(b"1\n"))
    env = make(box)
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "count-words"
    assert obs[1]["content"].startswith("Count the words")
    obs, reward, terminated, truncated, info = env.step("```bash\nwc -w text.txt\n```")
    assert (reward, terminated, obs[0]["content"]) == (0.0, False, "exit code 0\nstdout:\nout\n")
    obs, reward, terminated, truncated, info = env.step("<done/>")
    assert (reward, terminated, truncated, info["failure"]) == (1.0, True, False, None)
    (grading,) = box.gradings
    assert grading.command.endswith("/tests/test.sh") and grading.timeout == 30.0
    assert set(grading.files) == {"/tests/test.sh", "/tests/check.py"}
    pool = env.unwrapped.sandbox_pool
    (kind,) = pool.kinds
    task = read_task(EXAMPLES / "count-words")
    assert kind.image == image_tag(task) and kind.memory_mb == 512
    assert kind.seed_dir == "/opt/rollgym/seed" and kind.verifier_dirs == ("/tests", "/logs")


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (graded(None, timed_out=True), "the verifier ran past its 30 s"),
        (graded(b"all good"), "reward.txt is not a number"),
        (graded(None), "wrote no reward"),
    ],
)
def test_a_verifier_that_hangs_or_writes_garbage_is_an_infra_failure(result, message) -> None:
    env = make(ScriptedBox(result))
    env.reset(seed=0)
    _obs, reward, terminated, truncated, info = env.step("<done/>")
    assert (reward, terminated, truncated, info["failure"]) == (0.0, False, True, "infra")
    assert message in info["error"]


def test_the_tasks_turn_limit_ends_the_episode_graded(tmp_path: Path) -> None:
    task = tmp_path / "count-words"
    shutil.copytree(EXAMPLES / "count-words", task)
    toml = (task / "task.toml").read_text().replace("max_turns = 8", "max_turns = 2")
    (task / "task.toml").write_text(toml)
    box = ScriptedBox(graded(b"0"))
    register()
    env = gymnasium.make("harbor/Tasks-v0", tasks_dir=str(task), sandbox_pool=ScriptedKinds(box))
    env.reset(seed=0)
    assert env.step("```bash\nls\n```")[2] is False
    obs, reward, terminated, truncated, info = env.step("no block at all")
    assert terminated and not truncated
    assert "No code block found" in obs[0]["content"]
    assert info["failure"] == "task"  # the last message was rejected, and still graded
    assert reward == -0.05 and len(box.gradings) == 1


def test_the_tasks_time_limit_caps_commands_and_ends_the_episode(tmp_path: Path) -> None:
    task = tmp_path / "count-words"
    shutil.copytree(EXAMPLES / "count-words", task)
    toml = (task / "task.toml").read_text().replace("timeout_sec = 120.0", "timeout_sec = 1.0")
    (task / "task.toml").write_text(toml)
    box = ScriptedBox(graded(b"0"), seconds=0.6)
    register()
    env = gymnasium.make("harbor/Tasks-v0", tasks_dir=str(task), sandbox_pool=ScriptedKinds(box))
    env.reset(seed=0)
    assert env.step("```bash\nls\n```")[2] is False  # 0.6 s of 1 s spent
    obs, _reward, terminated, _truncated, _info = env.step("```bash\nls\n```")
    assert terminated and "Your time (1 s) is up." in obs[0]["content"]


def test_a_block_and_done_together_are_rejected() -> None:
    env = make(ScriptedBox(graded(b"1")))
    env.reset(seed=0)
    obs, reward, terminated, _truncated, info = env.step("```bash\nls\n```\n<done/>")
    assert (reward, terminated, info["failure"]) == (-0.05, False, "task")
    assert "not both" in obs[0]["content"]


def test_a_pool_of_one_image_is_refused_with_the_reason() -> None:
    class OneImage:
        def acquire(self, *, timeout=None): ...
        def release(self, sandbox): ...
        def close(self): ...

    register()
    env = gymnasium.make(
        "harbor/Tasks-v0", tasks_dir=str(EXAMPLES / "count-words"), sandbox_pool=OneImage()
    )
    with pytest.raises(InfraError, match="Harbor tasks need a pool of boxes per image"):
        env.reset(seed=0)


def test_the_oracle_ships_the_solution_and_do_nothing_says_done() -> None:
    env = make(ScriptedBox(graded(b"1")))
    env.reset(seed=0)
    first = oracle(env)([])
    assert first.startswith("```bash\nmkdir -p /tmp/solution && base64 -d")
    assert first.rstrip().endswith("bash /solution/solve.sh\n```")
    assert oracle(env)([{"role": "assistant", "content": first}]) == "<done/>"
    assert do_nothing(env)([]) == "<done/>"


def test_one_id_per_task_and_gymnasiums_checker() -> None:
    ids = register_tasks(EXAMPLES)
    assert "harbor/count-words-v0" in ids and len(ids) == 12
    env = gymnasium.make(
        "harbor/fix-median-v0", sandbox_pool=ScriptedKinds(ScriptedBox(graded(b"1")))
    )
    assert isinstance(env.unwrapped, HarborEnv) and [t.name for t in env.unwrapped.tasks] == [
        "fix-median"
    ]
    check_env(env.unwrapped)
