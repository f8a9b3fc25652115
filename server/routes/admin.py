"""Admin routes (``Authorization: Bearer <ROLLGYM_ADMIN_TOKEN>``): weights, rollouts, buffer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response
from pydantic import ValidationError

from rollgym.contract import api
from rollgym.contract.canary import CANARY_HEADER, CanaryProbes
from rollgym.contract.wire import (
    AckRequest,
    AckResponse,
    EvaluationRequest,
    EvaluationResult,
    NcclInit,
    NcclUpdate,
    PolicyInfo,
    PullRequest,
    RolloutJob,
    RolloutStatus,
    WeightsFromPath,
    WeightUpdateResult,
)
from rollgym.engine.base import NcclWeights
from rollgym.server.access.env_access import check_request
from rollgym.server.errors import BadRequest
from rollgym.server.http.declared import declared
from rollgym.server.observability.canary import check_served_weights
from rollgym.server.rollout.evaluation import evaluate
from rollgym.server.routes.deps import Services, ServicesDep, require_admin

router = APIRouter(dependencies=[Depends(require_admin)])


@declared(router, api.WEIGHTS_UPLOAD)
async def upload_weights(
    request: Request,
    services: ServicesDep,
    x_expected_version: Annotated[str | None, Header()] = None,
    x_rollgym_canary: Annotated[str | None, Header()] = None,
) -> WeightUpdateResult:
    """Raw safetensors bytes, streamed; ``X-Expected-Version`` guards against races;
    ``X-Rollgym-Canary`` probes are scored once the weights serve (the canary)."""
    expected = _version_header(x_expected_version)
    probes = _canary_header(x_rollgym_canary)
    result = await services.weights.from_stream(request.stream(), expected)
    return await _with_canary(services, result, probes)


@declared(router, api.WEIGHTS_FROM_PATH)
async def weights_from_path(body: WeightsFromPath, services: ServicesDep) -> WeightUpdateResult:
    return await services.weights.from_path(Path(body.path), body.expected_version)


@declared(router, api.NCCL_INIT)
async def nccl_init(body: NcclInit, services: ServicesDep) -> PolicyInfo:
    """Join the trainer's broadcast group (vLLM's native weight transfer: NCCL on GPU
    hosts, gloo on CPU)."""
    await services.engine.init_nccl(body.model_dump())
    return PolicyInfo(
        policy_version=services.engine.policy_version,
        model=services.settings.engine.model_name,
        updating=services.weights.updating,
        lora_max_rank=services.engine.max_lora_rank,
    )


@declared(router, api.NCCL_UPDATE)
async def nccl_update(
    body: NcclUpdate,
    services: ServicesDep,
    x_rollgym_canary: Annotated[str | None, Header()] = None,
) -> WeightUpdateResult:
    """Receive the broadcast the trainer starts right after this call (NCCL on GPU hosts,
    gloo on CPU); ``X-Rollgym-Canary`` probes are scored once the weights serve."""
    probes = _canary_header(x_rollgym_canary)
    weights = NcclWeights(
        names=tuple(body.names),
        dtype_names=tuple(body.dtype_names),
        shapes=tuple(tuple(s) for s in body.shapes),
    )
    result = await services.weights.from_nccl(weights, body.expected_version)
    return await _with_canary(services, result, probes)


@declared(router, api.ROLLOUTS_START)
async def start_rollouts(body: RolloutJob, services: ServicesDep) -> RolloutStatus:
    for part in body.parts():  # every env of a mixture is checked, not just the first
        check_request(services.settings.env_access, part.env_id, part.env_kwargs, lane="admin")
    return await services.runner.start(body)


@declared(router, api.ROLLOUTS)
async def rollout_status(services: ServicesDep) -> RolloutStatus:
    return services.runner.status()


@declared(router, api.ROLLOUTS_STOP)
async def stop_rollouts(services: ServicesDep, drain: bool = False) -> RolloutStatus:
    """Stop the job: running groups are cancelled and counted, or finish with ``drain``."""
    return await services.runner.stop(drain=drain)


@declared(router, api.EVALUATE)
async def run_evaluation(body: EvaluationRequest, services: ServicesDep) -> EvaluationResult:
    """Episodes on held-out seeds with the current policy, beside any rollout job
    (``rollout.evaluation``): one group per seed, nothing filtered or stored."""
    check_request(services.settings.env_access, body.env_id, body.env_kwargs, lane="admin")
    return await evaluate(
        services.episodes,
        body,
        version=services.engine.policy_version,
        max_concurrent=services.settings.runner.max_concurrent_episodes,
    )


@declared(router, api.PULL)
async def pull(body: PullRequest, request: Request, services: ServicesDep) -> Response:
    """A ``PullResponse``, its groups as the buffer stored them (never serialized again)."""
    response, leased = await services.buffer.pull(
        body, services.engine.policy_version, abandoned=request.is_disconnected
    )
    answer = await asyncio.to_thread(leased.answer_bytes, response)
    return Response(answer, media_type="application/json")


@declared(router, api.ACK)
async def ack(body: AckRequest, services: ServicesDep) -> AckResponse:
    return AckResponse(acked=await services.buffer.ack(body.group_ids))


async def _with_canary(
    services: Services, result: WeightUpdateResult, probes: CanaryProbes | None
) -> WeightUpdateResult:
    """The update's answer, with the canary's verdict on the weights now served."""
    if probes is None:
        return result
    gauge = services.metrics.served_weights_mismatch
    canary = await check_served_weights(services.engine, probes, gauge)
    return result.model_copy(update={"canary": canary})


def _canary_header(value: str | None) -> CanaryProbes | None:
    if value is None:
        return None
    try:
        return CanaryProbes.model_validate_json(value)
    except ValidationError as exc:
        raise BadRequest(
            f"{CANARY_HEADER} must be CanaryProbes JSON (rollgym.contract.canary): "
            f"{exc.errors()[0]['msg']}"
        ) from None


def _version_header(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        version = int(value)
    except ValueError:
        raise BadRequest(f"X-Expected-Version must be an integer, got {value!r}") from None
    if version < 0:
        raise BadRequest("X-Expected-Version must be >= 0")
    return version
