"""``envs.make``: serving envs that users register in their own modules and packages."""

from __future__ import annotations

import pytest
from gymnasium.wrappers import TimeLimit

from rollgym import envs
from rollgym.envs.adapter import ChatAdapter
from rollgym.envs.aio import areset, astep
from rollgym.envs.errors import EnvLoadError, InfraError
from rollgym.envs.spaces import ChatText, Messages

USER_MODULE = '''
import string

import gymnasium
from gymnasium import spaces


class EchoEnv(gymnasium.Env):
    """Say hello: a plain text env, as a Gymnasium user would write it."""

    def __init__(self, word="hello", crash=""):
        self.observation_space = spaces.Text(max_length=64, charset=string.printable)
        self.action_space = spaces.Text(max_length=64, charset=string.printable)
        self.word, self.crash = word, crash

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.crash == "reset":
            raise RuntimeError("user env broke in reset")
        return f"Say {self.word}.", {"user_key": 1}

    def step(self, action):
        if self.crash == "step":
            raise ZeroDivisionError("user reward crashed")
        won = self.word in action
        return ("Well done." if won else "Try again."), float(won), won, False, {"user_key": 2}


class CounterEnv(gymnasium.Env):
    observation_space = spaces.Discrete(3)
    action_space = spaces.Discrete(2)


def register():
    gymnasium.register("{ns}/Echo-v0", entry_point=EchoEnv, max_episode_steps=3)
    gymnasium.register("{ns}/Counter-v0", entry_point=CounterEnv)
'''


@pytest.fixture(scope="module")
def user_paths(tmp_path_factory):
    """A user module (registers on import) and an installed-looking package with a
    ``rollgym.envs`` entry point, plus a broken entry point, on ``sys.path``."""
    root = tmp_path_factory.mktemp("user_site")
    (root / "user_text_envs.py").write_text(USER_MODULE.replace("{ns}", "user") + "\nregister()\n")
    (root / "entry_envs.py").write_text(USER_MODULE.replace("{ns}", "entry"))
    dist = root / "entry_envs-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: entry-envs\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[rollgym.envs]\nentry = entry_envs:register\nbroken = no_such_module_for_rollgym\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root))
        envs.load_user_envs.cache_clear()
        yield root
    envs.load_user_envs.cache_clear()


def test_a_module_colon_id_is_imported_and_adapted_to_chat(user_paths) -> None:
    env = envs.make("user_text_envs:user/Echo-v0")
    assert isinstance(env, ChatAdapter)
    assert isinstance(env.observation_space, Messages)
    assert isinstance(env.action_space, ChatText)
    obs, info = env.reset(seed=0)
    assert obs == ({"role": "user", "content": "Say hello."},)
    assert info == {"user_key": 1}
    obs, reward, terminated, truncated, info = env.step("héllo 👋 — hello!")
    assert obs == ({"role": "user", "content": "Well done."},)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["failure"] is None and info["error"] is None and info["user_key"] == 2
    assert env.get_wrapper_attr("tools") is None


def test_the_user_env_keeps_its_turn_limit(user_paths) -> None:
    env = envs.make("user_text_envs:user/Echo-v0", word="bye")
    env.reset()
    results = [env.step("nope") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)


def test_entry_points_are_loaded_and_a_broken_one_is_reported_not_fatal(user_paths) -> None:
    loaded = envs.load_user_envs()
    assert loaded["entry"] is None
    assert "no_such_module_for_rollgym" in loaded["broken"]
    env = envs.make("entry/Echo-v0")
    assert env.reset()[0][0]["content"] == "Say hello."
    with pytest.raises(EnvLoadError, match="entry point broken failed"):
        envs.make("nobody/Missing-v0")
    with pytest.raises(EnvLoadError, match="Environment registration via importing a module"):
        envs.make("no_such_user_module:user/Echo-v0")


def test_an_env_that_does_not_observe_text_is_refused(user_paths) -> None:
    with pytest.raises(EnvLoadError, match="not text"):
        envs.make("user_text_envs:user/Counter-v0")


def test_a_crashing_user_env_is_an_infrastructure_failure(user_paths) -> None:
    env = envs.make("user_text_envs:user/Echo-v0", crash="step")
    env.reset()
    obs, reward, terminated, truncated, info = env.step("hello")
    assert (obs, reward, terminated, truncated) == ((), 0.0, False, True)
    assert info["failure"] == "infra" and "ZeroDivisionError" in info["error"]
    with pytest.raises(InfraError, match="user env broke in reset"):
        envs.make("user_text_envs:user/Echo-v0", crash="reset").reset()


def test_rollgym_envs_are_served_as_they_are() -> None:
    env = envs.make("rollgym/GuessNumber-v0")
    assert isinstance(env, TimeLimit) and not isinstance(env, ChatAdapter)
    with pytest.raises(EnvLoadError, match=r"cannot make 'rollgym/NoSuchEnv-v0'"):
        envs.make("rollgym/NoSuchEnv-v0")


async def test_user_envs_run_under_asyncio(user_paths) -> None:
    env = envs.make("user_text_envs:user/Echo-v0")
    obs, _ = await areset(env, seed=1)
    assert obs[0]["content"] == "Say hello."
    obs, reward, terminated, _, info = await astep(env, "hello")
    assert (reward, terminated) == (1.0, True)
    assert {"failure", "error"} <= info.keys()
