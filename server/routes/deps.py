"""What routes get injected: the services on ``app.state``, the admin and agent checks.

They are ``async def`` because they never block: FastAPI runs a plain ``def`` dependency in
its thread pool, a thread hop per dependency per request (measured at 0.2-0.4 ms each on
a busy 2-core machine, several per request).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Depends, Header, Request

from rollgym.engine.base import PolicyEngine, ServingEngine
from rollgym.engine.weights.updater import WeightUpdater
from rollgym.envs.toolformats import ToolCallParser
from rollgym.server.access.agent_keys import Agent, AgentKeys, QuotaLedger
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import ServerSettings
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.dashboard.recorder import DashboardRecorder
from rollgym.server.http.auth import admin_dependency
from rollgym.server.observability.cost import CostMeter
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.episode import EpisodeRunner
from rollgym.server.rollout.runner import RolloutRunner
from rollgym.server.sessions.manager import SessionManager
from rollgym.server.sessions.response_log import ResponseLog


@dataclasses.dataclass
class Services:
    """Everything the routes use; built by the app's lifespan, one set per app."""

    settings: ServerSettings
    engine: ServingEngine
    policy: PolicyEngine  # the engine, metered
    codec: ChatCodec
    tool_parser: ToolCallParser  # reads tool calls out of answers (settings.tool_parser)
    buffer: TrajectoryBuffer
    runner: RolloutRunner
    episodes: EpisodeRunner  # what the runner plays its episodes with (evaluations too)
    sessions: SessionManager
    weights: WeightUpdater
    metrics: ServerMetrics
    dashboard: DashboardRecorder  # the live dashboard's spans and readings
    cost: CostMeter  # the cost board
    agent_keys: AgentKeys  # who may call the agent routes
    quotas: QuotaLedger  # what each agent key holds and has generated
    responses: ResponseLog = dataclasses.field(default_factory=ResponseLog)  # previous_response_id


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


require_admin = admin_dependency(lambda request: request.app.state.services.settings.admin_token)
"""Admin routes need ``Authorization: Bearer <ROLLGYM_ADMIN_TOKEN>`` (401/403)."""


async def require_agent(
    services: ServicesDep, authorization: Annotated[str | None, Header()] = None
) -> Agent:
    """Agent routes need ``Authorization: Bearer <agent key>`` (401/403; ``agent_keys``)."""
    return services.agent_keys.identify(authorization)


AgentDep = Annotated[Agent, Depends(require_agent)]
