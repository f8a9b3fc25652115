"""The doctor's checks that start something: a sandbox pool, an env's episode, an engine.

* ``sandbox``: a one-box pool starts (the server's kind, an ``ImagePool``, so that a Harbor
  task's or a data set's env gets boxes of its own image in it), Docker answers, the
  default image is there, and its box answers a shell command and a Python call (with
  their round-trip times). The env's own images answer when it plays.
* ``play``: an env's opening and a few turns, played by its scripted solver (rollgym's
  envs) or a fixed answer, with the env's real replies: the conversation the template
  checks render.
* ``logprobs``: the trainer computes each sampled token's logprob with transformers, the
  server samples it with vLLM; where they disagree, GRPO's importance ratio is off from the
  first step. Both run in this process on probe prompts (float32, temperature 1), one after
  the other; ``checks.logprob_agreement`` judges the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollgym.doctor.checks import Check, Turn, logprob_agreement
from rollgym.server.conversation.codec import ChatCodec, TemplateMessage

SANDBOX = "sandbox image and pool answer"
if TYPE_CHECKING:
    import gymnasium

FALLBACK_ANSWER = "I do not know."


@contextlib.contextmanager
def sandbox(found: dict[str, Check]) -> Iterator[Any]:
    """A started one-box Docker pool (its check in ``found``), or None if it cannot start
    (the failure in ``found``)."""
    from rollgym.sandboxes.base import SandboxError
    from rollgym.sandboxes.config import ImagePoolConfig
    from rollgym.sandboxes.docker import DockerImagePool

    config = ImagePoolConfig(max_boxes=1, health_interval_s=0)
    try:
        pool = DockerImagePool(config)
        pool.start()
    except SandboxError as exc:
        reason = f"a pool of one box of {config.box.image} did not start: {exc}"
        found[SANDBOX] = Check(SANDBOX, "fail", reason)
        yield None
        return
    try:
        found[SANDBOX] = _answers(pool, config.box.image)
        yield pool
    finally:
        pool.close()


def _answers(pool: Any, image: str) -> Check:
    from rollgym.sandboxes.base import SandboxError

    try:
        with pool.sandbox() as box:
            started = time.perf_counter()
            shell = box.run_shell("echo ok").stdout.strip()
            shell_ms = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            python = box.run_python("print(6 * 7)").stdout.strip()
            python_ms = (time.perf_counter() - started) * 1000
    except SandboxError as exc:
        return Check(SANDBOX, "fail", f"the box did not answer: {exc}")
    if (shell, python) != ("ok", "42"):
        return Check(SANDBOX, "fail", f"the box answered {shell!r} and {python!r}")
    return Check(SANDBOX, "pass", f"{image}: shell {shell_ms:.0f} ms, python {python_ms:.0f} ms")


def play(env: gymnasium.Env[Any, str], turns: int) -> tuple[list[TemplateMessage], list[Turn]]:
    """The env's opening messages and up to ``turns`` turns with its real replies."""
    from rollgym.envs.scripted import solver

    observation, _ = env.reset(seed=0)
    opening: list[TemplateMessage] = [dict(m) for m in observation]
    try:
        policy = solver(env)
    except TypeError:  # not one of rollgym's envs: a fixed answer
        policy = lambda history: FALLBACK_ANSWER  # noqa: E731
    history: list[Any] = list(opening)
    played: list[Turn] = []
    for _ in range(turns):
        action = policy(history)
        observation, _, terminated, truncated, _ = env.step(action)
        replies = tuple(dict(m) for m in observation)
        played.append(Turn(action, replies))
        history += [{"role": "assistant", "content": action}, *replies]
        if terminated or truncated:
            break
    return opening, played


def logprobs(
    model_dir: Path, prompts: Sequence[list[int]], *, max_model_len: int, tolerance: float
) -> Check:
    """vLLM samples on each prompt; transformers scores the same tokens (see above)."""
    import torch
    from transformers import AutoModelForCausalLM

    sampled = asyncio.run(_sample(model_dir, prompts, max_model_len))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    served: list[float] = []
    trained: list[float] = []
    for prompt, (tokens, logprobs) in zip(prompts, sampled, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + tokens])).logits[0].float()
        scores = torch.log_softmax(logits, dim=-1)
        positions = range(len(prompt) - 1, len(prompt) + len(tokens) - 1)
        trained += [scores[p, t].item() for p, t in zip(positions, tokens, strict=True)]
        served += logprobs
    return logprob_agreement(served, trained, prompts=len(prompts), tolerance=tolerance)


async def _sample(
    model_dir: Path, prompts: Sequence[list[int]], max_model_len: int
) -> list[tuple[list[int], list[float]]]:
    from rollgym.contract.wire import SamplingSettings
    from rollgym.engine.config import EngineConfig
    from rollgym.engine.vllm.engine import VLLMEngine

    config = EngineConfig(
        model_dir=model_dir, max_model_len=max_model_len, kv_cache_gib=0.5, warmup=False
    )
    settings = SamplingSettings(temperature=1.0, top_p=1.0, max_tokens=16)
    async with VLLMEngine(config) as engine:
        out = []
        for index, prompt in enumerate(prompts):
            generation = await engine.generate(prompt, settings, seed=index)
            out.append((generation.token_ids, generation.logprobs))
        return out


def probe_prompts(
    codec: ChatCodec, opening: Sequence[TemplateMessage], turns: Sequence[Turn], tools: Any
) -> list[list[int]]:
    """Three prompts: a plain question, the env's opening, and the conversation so far."""
    first = codec.first_prompt([{"role": "user", "content": "Guess a number from 1 to 16."}])
    prompts = [first, codec.first_prompt(opening, tools=tools)]
    if turns:
        messages = list(opening)
        for turn in turns[:-1]:
            messages += [{"role": "assistant", "content": turn.assistant}, *turn.replies]
        prompts.append(codec.first_prompt(messages, tools=tools))
    return prompts
