"""The server's HTTP API, each operation declared once: method, path, bodies, who may call it.

The server's routes (``rollgym.server.routes``), the cluster's router
(``rollgym.cluster.router``) and every client (the trainer's ``ServerClient``, the router's
calls to each server, ``rollgym export``'s archive reader) take method, path and models
from here, so the four cannot drift apart; ``tests/unit/test_api.py`` checks that the
server serves exactly these routes and that the router answers each of them.

    >>> PULL.method, PULL.path, PULL.request.__name__, PULL.answer.__name__, PULL.auth
    ('POST', '/admin/buffer/pull', 'PullRequest', 'PullResponse', 'admin')
    >>> SESSION_STEP.url(session_id="s1")
    '/v1/sessions/s1/step'

``request`` is the JSON body (None: no body, or raw bytes such as a weight upload),
``query`` the query parameters' model, ``answer`` the JSON answer (None: text, a page or
an asset); ``auth`` is ``open``, ``agent`` (an agent key) or ``admin`` (the admin token).
docs/http-api.md describes each route.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from rollgym.contract.archive import ArchivePage, ArchiveQuery
from rollgym.contract.dashboard import DashboardData, DashboardQuery, TrainerAccepted, TrainerReport
from rollgym.contract.openai import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    ModelList,
)
from rollgym.contract.responses import ResponseObject, ResponsesRequest
from rollgym.contract.wire import (
    AckRequest,
    AckResponse,
    EvaluationRequest,
    EvaluationResult,
    Health,
    NcclInit,
    NcclUpdate,
    PolicyInfo,
    PullRequest,
    PullResponse,
    RolloutJob,
    RolloutStatus,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStep,
    SessionStepResult,
    ToolCallResult,
    WeightsFromPath,
    WeightUpdateResult,
)

A = TypeVar("A", bound=BaseModel)
Method = Literal["GET", "POST", "DELETE"]
Auth = Literal["open", "agent", "admin"]


@dataclasses.dataclass(frozen=True)
class Route(Generic[A]):
    """One operation: how it is called and what crosses the wire (see the module docstring)."""

    method: Method
    path: str
    request: type[BaseModel] | None
    answer: type[A] | None
    auth: Auth = "open"
    status: int = 200
    query: type[BaseModel] | None = None

    def url(self, **params: Any) -> str:
        """The path with its ``{parameters}`` filled in."""
        return self.path.format(**params)


# --- open: health, the policy, metrics, the dashboard --------------------------------------

HEALTH = Route("GET", "/health", None, Health)
POLICY = Route("GET", "/v1/policy", None, PolicyInfo)
MODELS = Route("GET", "/v1/models", None, ModelList)
METRICS: Route[Any] = Route("GET", "/metrics", None, None)  # Prometheus text
DASHBOARD_PAGE: Route[Any] = Route("GET", "/dashboard", None, None)  # HTML
DASHBOARD_DATA = Route("GET", "/dashboard/data", None, DashboardData, query=DashboardQuery)
DASHBOARD_ASSET: Route[Any] = Route("GET", "/dashboard/{name}", None, None)  # its JS and CSS

# --- agents (an agent key): sessions, OpenAI-compatible generation ----------------------------

SESSION_CREATE = Route(
    "POST", "/v1/sessions", SessionCreate, SessionCreated, auth="agent", status=201
)
SESSION_STEP = Route(
    "POST", "/v1/sessions/{session_id}/step", SessionStep, SessionStepResult, auth="agent"
)
SESSION_TOOL_CALL = Route(
    "POST", "/v1/sessions/{session_id}/tool_calls/{call_id}", None, ToolCallResult, auth="agent"
)
SESSION_CLOSE = Route("DELETE", "/v1/sessions/{session_id}", None, SessionClosed, auth="agent")
CHAT = Route("POST", "/v1/chat/completions", ChatCompletionRequest, ChatCompletion, auth="agent")
# CHAT at a session's own base URL (``.../v1/sessions/{id}/v1``): any OpenAI client joins the
# session with that base URL alone, no header and no extra body
SESSION_CHAT = Route(
    "POST",
    "/v1/sessions/{session_id}/v1/chat/completions",
    ChatCompletionRequest,
    ChatCompletion,
    auth="agent",
)
COMPLETIONS = Route("POST", "/v1/completions", CompletionRequest, Completion, auth="agent")
RESPONSES = Route("POST", "/v1/responses", ResponsesRequest, ResponseObject, auth="agent")

# --- admin (the admin token) -----------------------------------------------------------------

WEIGHTS_UPLOAD = Route("POST", "/admin/weights", None, WeightUpdateResult, auth="admin")
WEIGHTS_FROM_PATH = Route(
    "POST", "/admin/weights/from-path", WeightsFromPath, WeightUpdateResult, auth="admin"
)
NCCL_INIT = Route("POST", "/admin/weights/nccl/init", NcclInit, PolicyInfo, auth="admin")
NCCL_UPDATE = Route("POST", "/admin/weights/nccl", NcclUpdate, WeightUpdateResult, auth="admin")
ROLLOUTS_START = Route("POST", "/admin/rollouts", RolloutJob, RolloutStatus, auth="admin")
ROLLOUTS = Route("GET", "/admin/rollouts", None, RolloutStatus, auth="admin")
ROLLOUTS_STOP = Route("DELETE", "/admin/rollouts", None, RolloutStatus, auth="admin")
EVALUATE = Route("POST", "/admin/evaluations", EvaluationRequest, EvaluationResult, auth="admin")
PULL = Route("POST", "/admin/buffer/pull", PullRequest, PullResponse, auth="admin")
ACK = Route("POST", "/admin/buffer/ack", AckRequest, AckResponse, auth="admin")
ARCHIVE = Route("GET", "/admin/archive", None, ArchivePage, auth="admin", query=ArchiveQuery)
TRAINER_REPORT = Route(
    "POST", "/admin/dashboard/trainer", TrainerReport, TrainerAccepted, auth="admin"
)

ROUTES: tuple[Route[Any], ...] = (
    HEALTH, POLICY, MODELS, METRICS, DASHBOARD_PAGE, DASHBOARD_DATA, DASHBOARD_ASSET,
    SESSION_CREATE, SESSION_STEP, SESSION_TOOL_CALL, SESSION_CLOSE, CHAT, SESSION_CHAT,
    COMPLETIONS, RESPONSES,
    WEIGHTS_UPLOAD, WEIGHTS_FROM_PATH, NCCL_INIT, NCCL_UPDATE, ROLLOUTS_START, ROLLOUTS,
    ROLLOUTS_STOP, EVALUATE, PULL, ACK, ARCHIVE, TRAINER_REPORT,
)  # fmt: skip
"""Every route of the server, in the order docs/http-api.md describes them."""
