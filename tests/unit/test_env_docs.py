"""docs/environments.md stays true: its user env is the example package's code, and its
sandboxed env example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium
import pytest

from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "environments.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC, flags=re.DOTALL | re.MULTILINE)


def block_with(marker: str) -> str:
    (block,) = [b for b in BLOCKS if marker in b]
    return block


def test_the_documented_user_env_is_the_example_package() -> None:
    source = (ROOT / "examples/rollgym-example-env/rollgym_example_env/__init__.py").read_text()
    code = source.split('"""', 2)[2].lstrip("\n")  # the module without its docstring
    assert (
        block_with("class ReverseEnv").removeprefix("# rollgym_example_env/__init__.py\n") == code
    )


def test_the_documented_sandboxed_env_runs_as_written() -> None:
    namespace: dict = {}
    if "mine/EchoWord-v0" in gymnasium.registry:
        del gymnasium.registry["mine/EchoWord-v0"]
    exec(compile(block_with("class EchoWordEnv"), "environments.md", "exec"), namespace)
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        env = gymnasium.make("mine/EchoWord-v0", sandbox_pool=pool)
        obs, info = env.reset(seed=1)
        assert obs[1]["content"] == "Print the word that is in secret.txt."
        _, reward, terminated, _, info = env.step("no code")
        assert (reward, terminated, info["failure"]) == (-0.1, False, "task")
        _, reward, terminated, _, info = env.step("```bash\necho wrong\n```")
        assert (reward, terminated) == (0.0, False)
        _, reward, terminated, _, info = env.step("```bash\ncat secret.txt\n```")
        assert (reward, terminated) == (1.0, True)
        assert env.get_wrapper_attr("sandbox_s") > 0.0
        env.close()
    del gymnasium.registry["mine/EchoWord-v0"]
    with pytest.raises(gymnasium.error.Error):
        gymnasium.spec("mine/EchoWord-v0")
