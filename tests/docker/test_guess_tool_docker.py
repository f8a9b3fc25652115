"""GuessTool's two sandbox clients on real containers: rollgym's env through the in-box
executor, and bench.peers' TRL environment through one ``docker exec`` per guess into a
container of the same image and flags. The same guesses get the same verdicts."""

from __future__ import annotations

import gymnasium
import pytest

from bench.peers_trl import ExecBoxes, GuessGame
from rollgym.envs.guess_tool import guess_call
from rollgym.envs.programs import Meter
from rollgym.sandboxes.config import PoolConfig, SandboxConfig
from rollgym.sandboxes.docker import DockerSandboxPool

PLAYS = [[4, 6, 7], [2, 3, 1], [8, 5, 6]]


@pytest.fixture(scope="module")
def pool():
    with DockerSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        yield pool


@pytest.fixture(scope="module")
def boxes():
    with ExecBoxes() as boxes:
        yield boxes


@pytest.mark.parametrize("seed", [0, 5])
def test_both_clients_give_the_same_verdicts(seed: int, pool, boxes) -> None:
    env = gymnasium.make("rollgym/GuessTool-v0", sandbox_pool=pool)
    meter = Meter()
    game = GuessGame(boxes.start(), meter)
    try:
        for guesses in PLAYS:
            env.reset(seed=seed)
            game.reset(seed=seed)
            total = 0.0
            for number in guesses:
                obs, reward, terminated, truncated, info = env.step(guess_call(number))
                assert info["failure"] is None, info["error"]
                assert game.guess(number) == obs[0]["content"]
                total += reward
                if terminated or truncated:
                    break
            assert game.get_reward() == pytest.approx(total)
    finally:
        env.close()
    assert meter.seconds > 0


def test_the_exec_box_is_hardened_like_rollgyms(boxes) -> None:
    run = boxes.start()
    assert run(["id", "-u"]) == (0, f"{SandboxConfig().uid}\n")  # the agent's, not root
    code, _ = run(["sh", "-c", "touch /etc/x"])
    assert code != 0  # read-only root
    container = boxes.containers[-1]
    container.reload()
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"]
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
