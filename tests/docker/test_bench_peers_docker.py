"""bench.peers' TRL arm on real containers: the built-in task through rollgym's TRL door,
once on rollgym's boxes (the in-box executor) and once on the arm's ``ExecPool`` (one
``docker exec`` per call, a new interpreter per call). The same calls get the same
replies and rewards; the exec boxes are hardened like rollgym's."""

from __future__ import annotations

import pytest

from bench.peers_trl import ExecPool
from rollgym.doors.trl import TrlEnvironments, closing_reward
from rollgym.envs.errors import ActionError
from rollgym.sandboxes.config import PoolConfig, SandboxConfig
from rollgym.sandboxes.docker import DockerSandboxPool

SEEDS = range(6)  # add, mul and sum (a file only the box holds) among them
LOOP = "while True: pass"


@pytest.fixture(scope="module")
def exec_pool():
    pool = ExecPool(size=1)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def docker_pool():
    with DockerSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        yield pool


def play(pool, seed: int, codes: list[str] | None = None) -> tuple[list[str], float]:
    """One episode through the door: the task's reference calls (or ``codes``), then the
    reference answer; the tool replies (a rejected call's feedback) and the return."""
    with TrlEnvironments("rollgym/Compute-v0", sandbox_pool=pool, command_timeout_s=2) as envs:
        environment = envs()
        environment.reset(**envs.rows([seed])[0])
        solved = environment._env.unwrapped.solved
        replies = []
        for code in codes or list(solved.codes):
            try:
                replies.append(environment.python(code=code))
            except ActionError as exc:  # TRL shows a raised error to the model as the reply
                replies.append(str(exc))
        answer = [{"role": "assistant", "content": f"<answer>{solved.task.answer}</answer>"}]
        closing = closing_reward([answer], [environment])[0]
        return replies, environment.get_reward() + closing


@pytest.mark.parametrize("seed", SEEDS)
def test_both_boxes_give_the_same_replies_and_rewards(seed: int, exec_pool, docker_pool) -> None:
    replies, reward = play(exec_pool, seed)
    assert (replies, reward) == play(docker_pool, seed)
    assert reward == 1.0 and replies[-1].strip()  # the reference solves it through the tool


def test_a_failing_or_endless_call_is_feedback_in_both(exec_pool, docker_pool) -> None:
    codes = ["print(1 / 0)", LOOP, "print(6 * 7)"]
    replies, _ = play(exec_pool, 0, codes)
    assert "ZeroDivisionError" in replies[0] and "timed out after 2 s" in replies[1]
    assert replies[2].strip() == "42"
    theirs, _ = play(docker_pool, 0, codes)
    assert "ZeroDivisionError" in theirs[0] and "timed out after 2 s" in theirs[1]


def test_the_exec_box_is_hardened_like_rollgyms(exec_pool) -> None:
    box = exec_pool.acquire()
    try:
        assert box.run_python("import os; print(os.getuid())").stdout == f"{SandboxConfig().uid}\n"
        assert not box.run_python("open('/etc/x', 'w')").ok  # read-only root
        box.write_file("data.txt", "7\n")
        assert box.run_python("print(open('data.txt').read())").stdout == "7\n\n"
    finally:
        exec_pool.release(box)
    assert box.run_python("import os; print(os.listdir('.'))").stdout == "[]\n"  # reset
    host = exec_pool._containers[-1].attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"]
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
