"""The app factory: ``create_app(settings)`` builds the FastAPI app; its lifespan runs it.

Start-up, in order: the engine (vLLM, or an injected one) and the last applied weights at
their version (``rollgym.engine.weights.updater.restore_policy``), the tokenizer, the buffer (SQLite),
the sandbox pool (if configured), the rollout runner (resuming a persisted job) and the
session manager with its idle sweeper; all of it lives in one ``Services`` on
``app.state.services``. Shutdown runs the other way round: the runner stops (running
groups are dropped and counted; the job stays persisted), sessions close (unfinished
episodes kept aside as invalid), the buffer closes, the pool's boxes are removed, the
engine shuts down.

Every request passes ``server.http.guards``: a capped body, and a last-resort answer in the one
error body for anything no handler translated; ``server.observability.timing`` adds to each answer the
server's own reading of where the request's time went (``Server-Timing``).

    app = create_app(ServerSettings(admin_token="..."))      # uvicorn.run(app)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request, Response

from rollgym.engine.base import ServingEngine, StagedWeights
from rollgym.engine.config import EngineConfig
from rollgym.engine.errors import EngineError
from rollgym.engine.precision import admitted_verdict, serving_precision
from rollgym.engine.weights.safetensors_check import checkpoint_files
from rollgym.engine.weights.store import PolicyStore
from rollgym.engine.weights.updater import WeightUpdater, restore_policy
from rollgym.envs.toolformats import ToolCallParser
from rollgym.sandboxes.base import SandboxPool
from rollgym.sandboxes.metrics import MetricsSink
from rollgym.server.access.agent_keys import AgentKeys, QuotaLedger
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import SandboxSettings, ServerSettings
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.dashboard.recorder import DashboardRecorder, Reading
from rollgym.server.dashboard.sampler import read_server, sample
from rollgym.server.errors import engine_status
from rollgym.server.http.errors import error_response, install_error_handlers
from rollgym.server.http.guards import BodyLimit, LastResort
from rollgym.server.observability.cost import CostCollector, CostMeter, live_board
from rollgym.server.observability.event_loop import watch_loop
from rollgym.server.observability.metrics import LiveGauges, ServerMetrics
from rollgym.server.observability.observed import ObservedEngine
from rollgym.server.observability.timing import ServerTiming
from rollgym.server.rollout.admission import AdmissionGate, SharedWindow
from rollgym.server.rollout.environments import RegistryEnvs
from rollgym.server.rollout.episode import EpisodeRunner
from rollgym.server.rollout.runner import RolloutRunner
from rollgym.server.routes import admin, agents, archive, dashboard, openai, responses
from rollgym.server.routes.deps import Services
from rollgym.server.sessions.manager import SessionManager

UPLOAD_ROUTE = "/admin/weights"  # streamed to disk under its own cap, max_weight_bytes

logger = logging.getLogger(__name__)
EngineFactory = Callable[[EngineConfig], ServingEngine]
PoolFactory = Callable[[SandboxSettings, MetricsSink], SandboxPool]


def create_app(
    settings: ServerSettings,
    *,
    engine_factory: EngineFactory | None = None,
    pool_factory: PoolFactory | None = None,
) -> FastAPI:
    """The server's app. ``engine_factory`` defaults to vLLM, ``pool_factory`` to Docker."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _services(settings, engine_factory, pool_factory) as services:
            app.state.services = services
            yield

    app = FastAPI(title="rollgym rollout server", lifespan=lifespan)
    app.include_router(agents.router)
    app.include_router(openai.router)
    app.include_router(responses.router)
    app.include_router(admin.router)
    app.include_router(archive.router)
    app.include_router(dashboard.router)
    app.include_router(dashboard.admin_router)
    _install_error_handlers(app)
    app.add_middleware(LastResort)
    app.add_middleware(
        BodyLimit, max_bytes=settings.max_body_bytes, exempt=frozenset({UPLOAD_ROUTE})
    )
    app.add_middleware(ServerTiming)
    return app


@contextlib.asynccontextmanager
async def _services(
    settings: ServerSettings,
    engine_factory: EngineFactory | None,
    pool_factory: PoolFactory | None,
) -> AsyncIterator[Services]:
    metrics = ServerMetrics()
    recorder = DashboardRecorder(settings.dashboard)
    engine = (engine_factory or _vllm_engine)(settings.engine)
    async with contextlib.AsyncExitStack() as stack:
        await engine.start()
        stack.push_async_callback(engine.close)
        weights = await _weight_updater(settings, engine, metrics)
        codec = ChatCodec.from_model_dir(settings.engine.model_dir)
        tool_parser = ToolCallParser(settings.tool_parser, codec.tokenizer)
        cost = _cost_meter(settings, engine)
        metrics.registry.register(CostCollector(lambda: live_board(cost, recorder)))
        buffer = await stack.enter_async_context(
            TrajectoryBuffer(
                settings.buffer_path, settings.buffer, observers=[metrics, recorder, cost]
            )
        )
        pool = await _start_pool(settings.sandboxes, metrics, pool_factory, stack)
        metrics.registry.register(LiveGauges(lambda: engine.policy_version, buffer, pool))
        envs = RegistryEnvs(lambda: pool)
        policy = ObservedEngine(
            engine, metrics.record_generation, recorder.sampling_span, cost.observe
        )
        max_model_len = settings.engine.max_model_len
        episodes = EpisodeRunner(policy, codec, envs, max_model_len=max_model_len, metrics=metrics)
        no_job = AdmissionGate(settings.sessions.max_staleness, settings.sessions.groups_per_batch)
        window = SharedWindow(no_job, buffered=lambda: buffer.depth.total)
        runner = RolloutRunner(
            episodes,
            buffer,
            metrics,
            settings.runner,
            job_path=settings.rollout_job_path,
            window=window,
        )
        stack.push_async_callback(runner.close)
        sessions = SessionManager(
            policy,
            codec,
            envs,
            buffer,
            metrics,
            settings.sessions,
            access=settings.env_access,
            max_model_len=max_model_len,
            default_max_tokens=settings.engine.sampling.max_tokens,
            window=window,
        )
        stack.push_async_callback(sessions.close_all)
        for task in (sessions.run_sweeper(), watch_loop(metrics)):
            stack.push_async_callback(_cancel, asyncio.create_task(task))
        reader = functools.partial(_reading, metrics, engine, buffer, cost)
        dashboard_sampler = asyncio.create_task(sample(recorder, reader))
        stack.push_async_callback(_cancel, dashboard_sampler)
        await runner.resume()
        yield Services(
            settings=settings,
            engine=engine,
            policy=policy,
            codec=codec,
            tool_parser=tool_parser,
            buffer=buffer,
            runner=runner,
            episodes=episodes,
            sessions=sessions,
            weights=weights,
            metrics=metrics,
            dashboard=recorder,
            cost=cost,
            agent_keys=AgentKeys(settings.agents),
            quotas=QuotaLedger(refused=_count_refusal(metrics)),
        )


def _count_refusal(metrics: ServerMetrics) -> Callable[[str, str], None]:
    return lambda agent, quota: metrics.quota_refusals.labels(agent=agent, quota=quota).inc()


async def _weight_updater(
    settings: ServerSettings, engine: ServingEngine, metrics: ServerMetrics
) -> WeightUpdater:
    """The updater, once the engine serves the last applied weights at their version."""
    store = PolicyStore(settings.policy_dir)
    aliases = engine.tied_aliases()
    served = await restore_policy(engine, store, settings.staging_dir, aliases)
    base = StagedWeights(tuple(checkpoint_files(settings.engine.model_dir)), nbytes=0)
    return WeightUpdater(
        engine,
        settings.staging_dir,
        store,
        max_bytes=settings.max_weight_bytes,
        metrics=metrics.engine_sink,
        checks=settings.weights,
        aliases=aliases,
        served=served or base,
    )


def _reading(
    metrics: ServerMetrics,
    engine: ServingEngine,
    buffer: TrajectoryBuffer,
    cost: CostMeter,
    at: float,
) -> Reading:
    cost.tick(at)
    return read_server(metrics.registry, engine.policy_version, buffer.depth, at=at)


def _cost_meter(settings: ServerSettings, engine: ServingEngine) -> CostMeter:
    """The cost board's meter, with the engine's step meter and gate where it has them,
    and the speed-up the precision gate measured when serving below training precision."""
    verdict = admitted_verdict(settings.engine)
    return CostMeter(
        settings.cost,
        engine_meter=getattr(engine, "meter", None),
        speculation=getattr(engine, "speculation", None),
        serving_dtype=serving_precision(settings.engine),
        precision_speedup=verdict.speedup if verdict else None,
        precision_kl=verdict.candidate.kl_to_training if verdict else None,
    )


def _vllm_engine(config: EngineConfig) -> ServingEngine:
    from rollgym.engine.vllm.engine import VLLMEngine

    return VLLMEngine(config)


def _docker_pool(config: SandboxSettings, sink: MetricsSink) -> SandboxPool:
    from rollgym.sandboxes.config import (
        ImagePoolConfig,
        PoolConfig,
        SandboxConfig,
        default_runtime_dir,
    )
    from rollgym.sandboxes.docker import DockerImagePool, DockerSandboxPool

    box = SandboxConfig(**config.model_dump(include={"image", "cpuset"}, exclude_none=True))
    if config.max_boxes:  # boxes of many images (tasks that bring their own) under one cap
        images = ImagePoolConfig(
            max_boxes=config.max_boxes,
            max_memory_mb=config.max_memory_mb,
            warm_default=config.pool_size,
            acquire_timeout_s=config.acquire_timeout_s,
            box=box,
            runtime_dir=config.runtime_dir or default_runtime_dir(),
            remote=config.remote,
        )
        return DockerImagePool(images, metrics=sink)
    pool_config = PoolConfig(
        size=config.pool_size,
        acquire_timeout_s=config.acquire_timeout_s,
        box=box,
        runtime_dir=config.runtime_dir or default_runtime_dir(),
        remote=config.remote,
    )
    return DockerSandboxPool(pool_config, metrics=sink)


async def _start_pool(
    config: SandboxSettings,
    metrics: ServerMetrics,
    factory: PoolFactory | None,
    stack: contextlib.AsyncExitStack,
) -> SandboxPool | None:
    if config.pool_size == 0 and config.max_boxes == 0:
        return None
    pool = (factory or _docker_pool)(config, metrics.sandbox_sink)
    start = getattr(pool, "start", None)
    if start is not None:
        await asyncio.to_thread(start)
    stack.push_async_callback(asyncio.to_thread, pool.close)
    return pool


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _install_error_handlers(app: FastAPI) -> None:
    """One error body everywhere (``server.http.errors``), the engine's errors included."""
    install_error_handlers(app, logger=logger)
    app.add_exception_handler(EngineError, _engine_error)  # type: ignore[arg-type]


async def _engine_error(request: Request, exc: EngineError) -> Response:
    status, code = engine_status(exc)
    if status >= 500:
        logger.error("%s %s: %s", request.method, request.url.path, exc, exc_info=exc)
    return error_response(status, code, str(exc))
