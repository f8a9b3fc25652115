"""The engine's seams: sampling (``PolicyEngine``), weight swaps (``WeightTarget``), a life.

Everything in the server that samples (the rollout runner, the OpenAI routes, external-agent
sessions) goes through a ``PolicyEngine``: token ids in, token ids, logprobs and the
version that produced them out. Weight updates go to a ``WeightTarget``: it describes the
tensors it serves (a ``Manifest``) and swaps in weights that were checked against it, from
one of two sources:

* ``StagedWeights``: safetensors files on local disk (an upload, or a shared volume). The
  CPU path and the general one: the engine's workers reload them in checkpoint format.
* ``NcclWeights``: tensors the trainer broadcasts over NCCL (vLLM's native weight
  transfer). GPU hosts only; it cannot run on the CPU build rollgym is developed on.

An engine started with ``engine.lora`` instead serves its base model plus a LoRA adapter
(``AdapterWeights``, vLLM's LoRA serving), and takes adapters only.

A ``ServingEngine`` is both, with a life (``start``/``close``). The vLLM adapter
(``engine.vllm.engine``) implements it for real; ``engine.fake`` serves unit tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import InFlightPolicy

FinishReason = Literal["stop", "length", "abort"]

# Bytes per value of each safetensors dtype code, and the codes of the torch dtypes a
# trainer sends over NCCL.
ITEM_SIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
TORCH_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


# --- sampling -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Generation:
    """One sampled completion, exactly as the engine produced it.

    ``logprobs[i]`` is the behaviour log-probability of ``token_ids[i]`` under the policy at
    ``policy_version``. ``cached_tokens`` counts prompt tokens served from the prefix cache.
    ``queue_s`` is the wait before the engine scheduled the request; ``model_s`` the rest,
    of which ``prefill_s`` until the first token (the prompt's uncached part).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int
    prompt_tokens: int
    cached_tokens: int = 0
    queue_s: float = 0.0
    model_s: float = 0.0
    prefill_s: float = 0.0


class Abandoned(asyncio.CancelledError):
    """A generation cancelled by its caller (its client left): the engine stopped sampling
    it; ``generated`` tokens had been sampled (what the caller's key is charged). A
    ``CancelledError``: the cancellation goes on as one."""

    def __init__(self, generated: int):
        super().__init__(f"abandoned after {generated} tokens")
        self.generated = generated


@dataclasses.dataclass(frozen=True)
class OutputConstraint:
    """What constrained decoding lets the model write (vLLM's structured outputs, xgrammar).

    ``kind`` names one of vLLM's ``StructuredOutputsParams`` constraints: ``json`` (``spec``
    is a JSON schema's text), ``json_object`` (any JSON object; ``spec`` unused) or
    ``structural_tag`` (``spec`` is an xgrammar structural tag's JSON: the tool calls of a
    model family's own format). JSON is written without free whitespace. The grammar only
    masks what may be sampled: the tokens and logprobs a generation returns are the ones
    sampled, as without it.
    """

    kind: Literal["json", "json_object", "structural_tag"]
    spec: str = ""


@runtime_checkable
class PolicyEngine(Protocol):
    """An engine serving the current policy; its version rises by one per weight update."""

    @property
    def policy_version(self) -> int: ...

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
        """Sample a completion of ``prompt_ids``.

        It ends at a ``stop_token_ids`` token (kept) or after the token that completes one
        of the ``stop`` texts (kept whole: the caller cuts the text); ``seed`` makes the
        sampling reproducible; ``constraint`` limits what may be sampled. Cancelled, it
        stops sampling and raises ``Abandoned``.
        """
        ...


# --- weights ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor's safetensors dtype code (``F32``, ``BF16``...) and shape."""

    dtype: str
    shape: tuple[int, ...]


Manifest = Mapping[str, TensorSpec]


@dataclasses.dataclass(frozen=True)
class StagedWeights:
    """Safetensors files whose tensors match the manifest exactly.

    ``renames`` maps a name in the files to the name the engine loads it as (a tied
    ``lm_head.weight`` sent instead of the embedding); ``skip`` lists names not to load.
    """

    files: tuple[Path, ...]
    nbytes: int
    renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    skip: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class AdapterWeights:
    """A LoRA adapter to serve on top of the base model's weights (``engine.lora``).

    ``directory`` holds it in peft's format (``adapter_model.safetensors`` and
    ``adapter_config.json``), as vLLM's LoRA loader reads it; ``rank`` is its ``r``.
    """

    directory: Path
    rank: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class NcclWeights:
    """The tensors of one NCCL broadcast, in the order the trainer sends them."""

    names: tuple[str, ...]
    dtype_names: tuple[str, ...]  # torch names: "float32", "bfloat16", ...
    shapes: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int:
        sizes = [ITEM_SIZE.get(TORCH_DTYPE.get(d, ""), 0) for d in self.dtype_names]
        return sum(size * math.prod(shape) for size, shape in zip(sizes, self.shapes, strict=True))


Weights = StagedWeights | NcclWeights | AdapterWeights


@dataclasses.dataclass(frozen=True)
class Swap:
    """What one swap did: the version it made and how long its two phases took.

    ``load_s``: loading the weights while the old ones kept serving (0 where the engine
    loads inside the pause); ``pause_s``: the time no request could start (with the
    ``finish`` policy, the wait for running requests included).
    """

    version: int
    load_s: float
    pause_s: float


@runtime_checkable
class WeightTarget(Protocol):
    """An engine that can swap its weights; its version rises by one per swap."""

    @property
    def policy_version(self) -> int: ...

    @property
    def in_flight_policy(self) -> InFlightPolicy: ...

    @property
    def max_lora_rank(self) -> int | None:
        """The largest adapter rank it serves; None: it takes whole weights, not adapters."""
        ...

    def manifest(self) -> Manifest: ...

    async def swap_weights(self, weights: Weights, ready: Awaitable[object] | None = None) -> Swap:
        """Apply ``weights`` between engine steps (see ``in_flight_policy``), reset the
        prefix cache, and bump the version. ``ready`` (a check still running) is awaited
        after the load and before the pause: if it raises, nothing is swapped and its
        error is raised. On failure the old weights keep serving and the version does not
        move. An adapter needs no pause: it is loaded beside the one serving, then new
        requests get it (running ones finish on theirs, or, with ``abort``, run again on
        it); the prefix cache is kept per adapter, so versions never share a prefix."""
        ...


# --- the whole engine -------------------------------------------------------------------------


@runtime_checkable
class ServingEngine(PolicyEngine, WeightTarget, Protocol):
    """A ``PolicyEngine`` and ``WeightTarget`` with a life (``start``/``close``)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def restore(self, weights: StagedWeights | AdapterWeights, version: int) -> None:
        """Serve ``weights`` as ``version``: a restarted server resuming its last update."""
        ...

    def tied_aliases(self) -> dict[str, str]:
        """Alternative tensor names an update may use (see ``safetensors_check.stage``)."""
        ...

    async def init_nccl(self, init_info: dict[str, Any]) -> None:
        """Join the trainer's NCCL group; ``NotEnabled`` where there is none."""
        ...

    async def score(self, token_ids: Sequence[int]) -> list[float]:
        """The served policy's logprob of each token after the first, given those before it
        (temperature 1, no sampling): what the served-weights canary compares."""
        ...
