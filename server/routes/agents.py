"""Agent-facing routes: health, metrics and the policy (open), external-agent sessions
(an agent key: ``Authorization: Bearer <agent key>``, see ``server.access.agent_keys``),
and each session's own OpenAI base URL (``/v1/sessions/{id}/v1``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from rollgym.contract import api
from rollgym.contract.openai import ChatCompletion, ChatCompletionRequest
from rollgym.contract.wire import (
    Health,
    PolicyInfo,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStep,
    SessionStepResult,
    ToolCallResult,
)
from rollgym.server.errors import BadRequest
from rollgym.server.http.declared import declared
from rollgym.server.observability.metrics import CONTENT_TYPE
from rollgym.server.routes.deps import AgentDep, ServicesDep
from rollgym.server.routes.openai import chat_completions

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
        lora_max_rank=services.engine.max_lora_rank,
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


@declared(router, api.SESSION_TOOL_CALL)
async def session_tool_call(
    session_id: str, call_id: str, services: ServicesDep, agent: AgentDep
) -> ToolCallResult:
    return await services.sessions.tool_call(session_id, call_id, agent=agent.name)


@declared(router, api.SESSION_CHAT)
async def session_chat(
    session_id: str,
    body: ChatCompletionRequest,
    raw_request: Request,
    response: Response,
    services: ServicesDep,
    agent: AgentDep,
) -> ChatCompletion | StreamingResponse:
    """The chat route at the session's base URL (``.../v1/sessions/{id}/v1``): every call
    is a turn of that session, as with the ``X-Rollgym-Session`` header."""
    if body.session_id not in (None, session_id):
        raise BadRequest(
            f"the body names session {body.session_id!r}, the URL session {session_id!r}: "
            "drop session_id from the body (the base URL names the session)"
        )
    return await chat_completions(  # by name: it stops when its client leaves (raw_request)
        body=body,
        raw_request=raw_request,
        response=response,
        services=services,
        agent=agent,
        x_rollgym_session=session_id,
    )


@declared(router, api.SESSION_CLOSE)
async def close_session(session_id: str, services: ServicesDep, agent: AgentDep) -> SessionClosed:
    return await services.sessions.close(session_id, agent=agent.name)
