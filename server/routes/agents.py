"""Agent-facing routes: health, metrics and the policy (open), external-agent sessions
(an agent key: ``Authorization: Bearer <agent key>``, see ``server.access.agent_keys``)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from rollgym.contract import api
from rollgym.contract.wire import (
    Health,
    PolicyInfo,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStep,
    SessionStepResult,
)
from rollgym.server.http.declared import declared
from rollgym.server.observability.metrics import CONTENT_TYPE
from rollgym.server.routes.deps import AgentDep, ServicesDep

router = APIRouter()


@declared(router, api.HEALTH)
async def health(services: ServicesDep) -> Health:
    return Health(policy_version=services.engine.policy_version)


@declared(router, api.METRICS)
async def metrics(services: ServicesDep) -> Response:
    return Response(services.metrics.render(), media_type=CONTENT_TYPE)


@declared(router, api.POLICY)
async def policy(services: ServicesDep) -> PolicyInfo:
    return PolicyInfo(
        policy_version=services.engine.policy_version,
        model=services.settings.engine.model_name,
        updating=services.weights.updating,
    )


@declared(router, api.SESSION_CREATE)
async def create_session(
    body: SessionCreate, services: ServicesDep, agent: AgentDep
) -> SessionCreated:
    lease = services.quotas.open_session(agent)
    try:
        return await services.sessions.create(body, lease)
    except BaseException:
        lease.release()
        raise


@declared(router, api.SESSION_STEP)
async def step_session(
    session_id: str, body: SessionStep, services: ServicesDep, agent: AgentDep
) -> SessionStepResult:
    return await services.sessions.step(session_id, body.action, agent=agent.name)


@declared(router, api.SESSION_CLOSE)
async def close_session(session_id: str, services: ServicesDep, agent: AgentDep) -> SessionClosed:
    return await services.sessions.close(session_id, agent=agent.name)
