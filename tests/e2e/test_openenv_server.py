"""rollgym envs served over OpenEnv (issue 36, part 1), played with openenv-core's own
client (``GenericEnvClient``, its WebSocket sessions) and its HTTP routes, against
openenv-core's own server on a real uvicorn; the sandboxed env on real Docker boxes."""

from __future__ import annotations

import asyncio
import time

import gymnasium
import httpx
import pytest
from openenv.core import GenericEnvClient

from rollgym.doors.openenv_server import NO_EPISODE, EnvSource, openenv_app
from rollgym.envs.scripted import solver
from rollgym.run.loopback import on_loopback
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.docker import DockerSandboxPool


def direct_play(env_id: str, seed: int) -> list[tuple[list[dict[str, str]], float, bool]]:
    """The episode rollgym's own runner sees: (messages, reward, done) per step."""
    env = gymnasium.make(env_id)
    opening, _ = env.reset(seed=seed)
    policy, conversation, out = solver(env), list(opening), []
    done = False
    while not done:
        action = policy(conversation)
        messages, reward, terminated, truncated, _ = env.step(action)
        conversation += [{"role": "assistant", "content": action}, *messages]
        done = terminated or truncated
        out.append((list(messages), reward, done))
    env.close()
    return out


async def client_play(url: str, seed: int) -> list[tuple[list[dict[str, str]], float, bool]]:
    async with GenericEnvClient(base_url=url) as env:
        result = await env.reset(seed=seed)
        conversation, out = list(result.observation["messages"]), []
        policy = solver_for(seed)
        while not result.done:
            action = policy(conversation)
            result = await env.step({"message": action})
            messages = result.observation["messages"]
            conversation += [{"role": "assistant", "content": action}, *messages]
            out.append((messages, result.reward, result.done))
        state = await env.state()
        assert state["env_id"] == "rollgym/GuessNumber-v0" and state["step_count"] == len(out)
    return out


def solver_for(seed: int):  # the same oracle, on a local env reset to the same seed
    env = gymnasium.make("rollgym/GuessNumber-v0")
    env.reset(seed=seed)
    return solver(env)


async def test_concurrent_sessions_play_as_rollgyms_runner_does() -> None:
    app = openenv_app(EnvSource("rollgym/GuessNumber-v0", {}), max_sessions=4)
    async with on_loopback(app) as url:
        played = await asyncio.gather(*(client_play(url, seed) for seed in (0, 1, 2)))
    assert played == [direct_play("rollgym/GuessNumber-v0", seed) for seed in (0, 1, 2)]


async def test_the_http_routes_answer_as_openenv_declares_them() -> None:
    app = openenv_app(EnvSource("rollgym/GuessNumber-v0", {"high": 8}))
    async with on_loopback(app) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/health")).json()["status"] == "healthy"
        schema = (await http.get("/schema")).json()
        assert schema["action"]["required"] == ["message"]
        assert "messages" in schema["observation"]["properties"]
        assert (await http.get("/metadata")).json()["name"] == "rollgym/GuessNumber-v0"
        opened = (await http.post("/reset", json={"seed": 0})).json()
        env = gymnasium.make("rollgym/GuessNumber-v0", high=8)
        assert opened["observation"]["messages"] == list(env.reset(seed=0)[0])
        stepped = await http.post("/step", json={"action": {"message": "4"}})
        assert stepped.status_code == 200 and stepped.json()["observation"]["error"] == NO_EPISODE
        bad = await http.post("/step", json={"action": {"text": "4"}})
        assert bad.status_code == 422


def test_an_unknown_env_fails_when_the_app_is_made() -> None:
    from rollgym.server.errors import NotFound

    with pytest.raises(NotFound, match="Nope-v0"):
        openenv_app(EnvSource("rollgym/Nope-v0", {}))


def leased_after_waiting(pool: DockerSandboxPool, limit_s: float = 120.0) -> int:
    """The pool's leased boxes once none is left, or after ``limit_s`` (OpenEnv's reaper
    looks every 5 s at least)."""
    deadline = time.monotonic() + limit_s
    while pool.status().leased and time.monotonic() < deadline:
        time.sleep(0.5)
    return pool.status().leased


async def test_sandboxed_sessions_take_boxes_and_an_idle_one_gives_its_box_back() -> None:
    with DockerSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:
        source = EnvSource("rollgym/Compute-v0", {"kinds": ["sum"]}, pool)
        app = openenv_app(source, max_sessions=2, session_timeout_s=1.0)
        async with on_loopback(app) as url:
            async with GenericEnvClient(base_url=url) as env:
                opened = await env.reset(seed=4)
                assert opened.observation["tools"][0]["function"]["name"] == "python"
                call = '<tool_call>{"name": "python", "arguments": {"code": "print(open(\'numbers.txt\').read())"}}</tool_call>'
                result = await env.step({"message": call})
                assert result.observation["failure"] is None and result.observation["sandbox_s"] > 0
                assert result.observation["messages"][0]["role"] == "tool"
            idle = GenericEnvClient(base_url=url)
            await idle.connect()
            await idle.reset(seed=5)
            assert pool.status().leased == 1  # the closed session's box went back at once
            assert await asyncio.to_thread(leased_after_waiting, pool) == 0
            await idle.close()


def test_the_command_serves_an_env_until_stopped() -> None:
    import subprocess
    import sys

    from rollgym.run.server_process import free_port

    port = free_port()
    command = [sys.executable, "-m", "rollgym.cli", "openenv-serve", "rollgym/GuessNumber-v0"]
    server = subprocess.Popen([*command, "--port", str(port), "--env-kwargs", '{"high": 4}'])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        with GenericEnvClient(base_url=url).sync() as env:
            opened = env.reset(seed=1).observation["messages"]
            assert "from 1 to 4" in opened[-1]["content"]
            assert env.step({"message": "9"}).observation["failure"] == "task"  # out of range
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_the_command_refuses_what_it_cannot_serve_in_one_line() -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "rollgym.cli", "openenv-serve"]
    unknown = subprocess.run([*command, "rollgym/Nope-v0"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "Nope-v0" in unknown.stderr
    bad = subprocess.run([*command, "x", "--env-kwargs", "[1]"], capture_output=True, text=True)
    assert bad.returncode == 2 and "a JSON object is wanted" in bad.stderr
