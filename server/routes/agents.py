"""Agent-facing routes: health, metrics and the policy (open), external-agent sessions
(an agent key: ``Authorization: Bearer <agent key>``, see ``server.access.agent_keys``)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from rollgym.contract.wire import (
    Health,
    PolicyInfo,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStep,
    SessionStepResult,
)
from rollgym.server.observability.metrics import CONTENT_TYPE
from rollgym.server.routes.deps import AgentDep, ServicesDep

router = APIRouter()


@router.get("/health")
async def health(services: ServicesDep) -> Health:
    return Health(policy_version=services.engine.policy_version)


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    return Response(services.metrics.render(), media_type=CONTENT_TYPE)


@router.get("/v1/policy")
async def policy(services: ServicesDep) -> PolicyInfo:
    return PolicyInfo(
        policy_version=services.engine.policy_version,
        model=services.settings.engine.model_name,
        updating=services.weights.updating,
    )


@router.post("/v1/sessions", status_code=status.HTTP_201_CREATED)
async def create_session(
    body: SessionCreate, services: ServicesDep, agent: AgentDep
) -> SessionCreated:
    lease = services.quotas.open_session(agent)
    try:
        return await services.sessions.create(body, lease)
    except BaseException:
        lease.release()
        raise


@router.post("/v1/sessions/{session_id}/step")
async def step_session(
    session_id: str, body: SessionStep, services: ServicesDep, agent: AgentDep
) -> SessionStepResult:
    return await services.sessions.step(session_id, body.action, agent=agent.name)


@router.delete("/v1/sessions/{session_id}")
async def close_session(session_id: str, services: ServicesDep, agent: AgentDep) -> SessionClosed:
    return await services.sessions.close(session_id, agent=agent.name)
