"""The policy seam: token in, token out, with logprobs and the version that produced them.

Everything in the server that samples (the rollout runner, the OpenAI routes, external-agent
sessions) goes through a ``PolicyEngine``. The vLLM adapter implements it for real; a fake
beside it serves unit tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from rollgym.contract.wire import SamplingSettings

FinishReason = Literal["stop", "length", "abort"]


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
    ) -> Generation:
        """Sample a completion of ``prompt_ids``.

        It ends at a ``stop_token_ids`` token (kept) or after the token that completes one
        of the ``stop`` texts (kept whole: the caller cuts the text); ``seed`` makes the
        sampling reproducible.
        """
        ...
