"""A fake rollout server for the trainer's unit tests (its real twin: tests/e2e/test_trainer_*).

``FakeServer`` implements the routes the trainer uses (health, weights, buffer pull/ack,
rollout jobs, metrics) over in-memory state, as a FastAPI app driven in-process with
``fastapi.testclient.TestClient``. It samples nothing: a ``producer`` callable makes the
groups a pull asks for, at the fake's current policy version, so a whole ``train`` run can
execute without an engine. Rewards are a pure function of the tokens, so learning has a
signal: ``reward_of`` pays 1 for completions whose first model token is ``GOOD_TOKEN``.

``scored_batches(monkeypatch)`` spies on what TRL trains on (advantages, masks, importance
ratios): each batch the loss saw, in order.

This module holds no tests; the test modules import it.
"""

from __future__ import annotations

import itertools
import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from safetensors.torch import load as safetensors_load
from transformers import AutoConfig, AutoModelForCausalLM

from rollgym.contract.canary import CANARY_HEADER, CanaryProbes, CanaryResult, logprob_mismatch
from rollgym.contract.cost import CostBoard
from rollgym.contract.dashboard import TrainerAccepted, TrainerReport
from rollgym.contract.paths import default_model_dir
from rollgym.contract.staleness import oldest_fresh_version, window_version
from rollgym.contract.wire import (
    AckRequest,
    ErrorBody,
    ErrorCode,
    EvaluationRequest,
    EvaluationResult,
    PolicyInfo,
    PullRequest,
    PullResponse,
    RolloutJob,
    RolloutStatus,
    Trajectory,
    TrajectoryGroup,
    TurnRecord,
    WeightUpdateResult,
)
from rollgym.trainer.canary import sequence_logprobs
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import ClientConfig, TrainerConfig

TOKEN = "test-admin-token"
GOOD_TOKEN = 17
PROMPT = [1, 33, 44, 55, 66]
ENV_TOKENS = [2, 77, 78]  # an environment reply (loss mask 0)


def make_trajectory(
    *,
    group_id: str,
    version: int,
    first_turn: list[int],
    second_turn: list[int] | None = None,
    reward: float | None = None,
    valid: bool = True,
    created_at: float | None = None,
) -> Trajectory:
    """A two-turn episode: model tokens, an environment reply, model tokens again."""
    second = second_turn if second_turn is not None else [first_turn[0], 2]
    turn_tokens = [len(first_turn), len(second)]
    completion = [*first_turn, *ENV_TOKENS, *second]
    mask = [1] * len(first_turn) + [0] * len(ENV_TOKENS) + [1] * len(second)
    logprobs = [-1.5 if m else 0.0 for m in mask]
    turns = [
        TurnRecord(
            index=i,
            policy_version=version,
            context_tokens=len(PROMPT),
            completion_tokens=turn_tokens[i],
            env_tokens=len(ENV_TOKENS),
            model_s=0.02,
            queue_s=0.001,
            env_s=0.005,
        )
        for i in range(2)
    ]
    return Trajectory(
        id=uuid.uuid4().hex,
        group_id=group_id,
        env_id="fake/Tokens-v0",
        prompt_ids=list(PROMPT),
        completion_ids=completion,
        logprobs=logprobs,
        loss_mask=mask,
        reward=reward if reward is not None else reward_of(first_turn),
        terminated=True,
        truncated=False,
        valid=valid,
        min_version=version,
        max_version=version,
        turns=turns,
        created_at=created_at if created_at is not None else time.time(),
    )


def reward_of(first_turn: list[int]) -> float:
    return 1.0 if first_turn[0] == GOOD_TOKEN else 0.0


def random_group(version: int, size: int, rng: random.Random) -> TrajectoryGroup:
    """``size`` episodes with mixed rewards (at least one good and one bad)."""
    group_id = uuid.uuid4().hex
    firsts = [[GOOD_TOKEN, rng.randrange(20, 600)] for _ in range(size // 2)]
    firsts += [[rng.randrange(20, 600), rng.randrange(20, 600)] for _ in range(size - size // 2)]
    trajectories = [
        make_trajectory(group_id=group_id, version=version, first_turn=f) for f in firsts
    ]
    return TrajectoryGroup(group_id=group_id, env_id="fake/Tokens-v0", trajectories=trajectories)


Producer = Callable[[int, int], TrajectoryGroup]  # (policy version, group size) -> group


class FakeServer:
    """In-memory stand-in for the rollout server's admin API (see the module docstring)."""

    def __init__(
        self,
        *,
        version: int = 0,
        producer: Producer | str | None = "random",
        dashboard: bool = True,
        model: str = "served-model",
    ) -> None:
        """``producer=None``: pulls hand out only what ``add`` put in (no sampling);
        ``model``: the name ``/v1/policy`` answers (the real server's: its model dir's)."""
        self.model = model
        rng = self._rng = random.Random(0)
        self.version = version
        if producer == "random":
            producer = lambda v, n: random_group(v, n, rng)  # noqa: E731
        self.producer: Producer | None = producer  # type: ignore[assignment]
        self.group_size = 4
        self.ready: list[TrajectoryGroup] = []
        self.leased: dict[str, TrajectoryGroup] = {}
        self.acked: set[str] = set()
        self.handed_out: list[str] = []  # every group id a pull returned, in order
        self.weights: list[dict[str, object]] = []
        self.metadata: list[dict[str, str]] = []  # each push's safetensors __metadata__
        self.job: RolloutJob | None = None
        self.dropped_stale = 0
        self.dropped_zero_variance = 0  # groups "filtered" before any pull (status only)
        self.pull_requests: list[PullRequest] = []
        # acks still answered before they start failing with 500 (None: never fail), to
        # play a crash between a checkpoint and its ack
        self.acks_before_failure: int | None = None
        # pushes the fake serves behind: 1 plays an update applied but never served (the canary)
        self.serving_lag = 0
        self.scores_canary = True  # False: a server (or router) that ignores the probes
        self._scorer: Any = None  # the default model's architecture, given the served weights
        self.reports: list[TrainerReport] = []  # the dashboard's step reports
        self.evaluations: list[EvaluationRequest] = []
        # what an evaluation answers per seed (absent: a random group of ``samples``), or
        # ``evaluator`` to answer whole requests
        self.evaluated: dict[int, TrajectoryGroup] = {}
        self.evaluator: Callable[[EvaluationRequest], list[TrajectoryGroup]] | None = None
        self._leases = itertools.count()
        self.app = self._build_app()
        if dashboard:
            self._add_dashboard(self.app)

    def _canary(self, probes: CanaryProbes) -> CanaryResult:
        """What the server's canary answers, scored by transformers on the served weights
        (the real twin scores with vLLM: tests/engine/test_server_engine.py)."""
        if self._scorer is None:
            config = AutoConfig.from_pretrained(default_model_dir())
            self._scorer = AutoModelForCausalLM.from_config(config)
        served = self.weights[max(len(self.weights) - 1 - self.serving_lag, 0)]
        missing, unexpected = self._scorer.load_state_dict(served, strict=False)
        assert not unexpected and all(name == "lm_head.weight" for name in missing)
        self._scorer.tie_weights()
        rows = [probe.token_ids for probe in probes.probes]
        mismatch = logprob_mismatch(
            [probe.logprobs for probe in probes.probes], sequence_logprobs(self._scorer, rows)
        )
        return CanaryResult(
            policy_version=self.version,
            mismatch=mismatch,
            tolerance=probes.tolerance,
            passed=mismatch <= probes.tolerance,
        )

    def client(self, *, token: str | None = TOKEN) -> ServerClient:
        config = ClientConfig(url="http://fake", admin_token=token)
        return ServerClient(config, http=TestClient(self.app, base_url="http://fake"))

    def add(self, *groups: TrajectoryGroup) -> None:
        self.ready.extend(groups)

    # --- the app ----------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        def error(status: int, code: str, message: str) -> JSONResponse:
            return JSONResponse(ErrorBody(error=code, message=message).model_dump(), status)

        @app.middleware("http")
        async def admin_token(request: Request, call_next):  # type: ignore[no-untyped-def]
            if request.url.path.startswith("/admin"):
                auth = request.headers.get("authorization")
                if auth is None:
                    return error(401, ErrorCode.UNAUTHORIZED, "missing admin token")
                if auth != f"Bearer {TOKEN}":
                    return error(403, ErrorCode.FORBIDDEN, "wrong admin token")
            return await call_next(request)

        @app.get("/health")
        def health() -> dict[str, object]:
            return {"status": "ok", "policy_version": self.version}

        @app.get("/v1/policy")
        def policy() -> PolicyInfo:
            return PolicyInfo(policy_version=self.version, model=self.model, updating=False)

        @app.post("/admin/weights")
        async def weights(
            request: Request,
            x_expected_version: Annotated[int | None, Header()] = None,
        ):  # type: ignore[no-untyped-def]
            if x_expected_version is not None and x_expected_version != self.version:
                return error(409, ErrorCode.VERSION_MISMATCH, f"server is at {self.version}")
            body = await request.body()
            self.weights.append(dict(safetensors_load(body)))
            header = json.loads(body[8 : 8 + int.from_bytes(body[:8], "little")])
            self.metadata.append(header.get("__metadata__") or {})
            self.version += 1
            probes = request.headers.get(CANARY_HEADER)
            return WeightUpdateResult(
                policy_version=self.version,
                bytes=len(body),
                load_s=0.0,
                apply_s=0.0,
                in_flight_policy="finish",
                canary=self._canary(CanaryProbes.model_validate_json(probes))
                if probes and self.scores_canary
                else None,
            )

        @app.post("/admin/buffer/pull")
        def pull(request: PullRequest) -> PullResponse:
            self.pull_requests.append(request)
            return self._pull(request)

        @app.post("/admin/buffer/ack")
        def ack(request: AckRequest):  # type: ignore[no-untyped-def]
            if self.acks_before_failure is not None:
                if self.acks_before_failure <= 0:
                    return error(500, ErrorCode.SERVER_ERROR, "ack lost")
                self.acks_before_failure -= 1
            for group_id in request.group_ids:
                self.leased.pop(group_id, None)
                self.acked.add(group_id)
            return {"acked": len(request.group_ids)}

        @app.post("/admin/evaluations")
        def evaluate(request: EvaluationRequest) -> EvaluationResult:
            self.evaluations.append(request)
            if self.evaluator is not None:
                return EvaluationResult(policy_version=self.version, groups=self.evaluator(request))
            groups = [
                self.evaluated.get(seed) or random_group(self.version, request.samples, self._rng)
                for seed in request.seeds
            ]
            return EvaluationResult(policy_version=self.version, groups=groups)

        @app.post("/admin/rollouts")
        def start(job: RolloutJob) -> RolloutStatus:
            self.job = job
            self.group_size = job.group_size
            return self._status()

        @app.get("/admin/rollouts")
        def status() -> RolloutStatus:
            return self._status()

        @app.delete("/admin/rollouts")
        def stop() -> RolloutStatus:
            self.job = None
            return self._status()

        return app

    def _add_dashboard(self, app: FastAPI) -> None:
        @app.post("/admin/dashboard/trainer")
        def report(body: TrainerReport) -> TrainerAccepted:
            self.reports.append(body)
            cost = CostBoard(  # a figure that names the step it was answered to
                device="cpu", devices=2, window_s=1.0, machine_s_per_trained_sample=1.5 * body.step
            )
            return TrainerAccepted(step=body.step, spans=len(body.busy_spans), cost=cost)

    def _pull(self, request: PullRequest) -> PullResponse:
        fresh, dropped = [], 0
        oldest = oldest_fresh_version(request.trainer_version, request.max_staleness)
        for group in self.ready:  # the real buffer's sweep: only groups too old are dropped
            judged = window_version(request.staleness_unit, group.min_version, group.max_version)
            if judged < oldest:
                dropped += len(group.trajectories)
            else:
                fresh.append(group)
        self.ready = fresh
        while len(self.ready) < request.num_groups and self.producer is not None:
            self.ready.append(self.producer(self.version, self.group_size))
        handed, self.ready = self.ready[: request.num_groups], self.ready[request.num_groups :]
        for group in handed:
            self.leased[group.group_id] = group
            self.handed_out.append(group.group_id)
        self.dropped_stale += dropped
        return PullResponse(
            lease_id=f"lease-{next(self._leases)}" if handed else None,
            groups=handed,
            dropped_stale=dropped,
            policy_version=self.version,
        )

    def redeliver_leases(self) -> None:
        """What the real server does after a lease timeout: unacked groups go back.

        Acks remove groups from the leases only, so a group re-delivered before its late
        ack is handed out again: the trainer must skip it by itself.
        """
        self.ready = list(self.leased.values()) + self.ready
        self.leased.clear()

    def _status(self) -> RolloutStatus:
        return RolloutStatus(
            running=self.job is not None,
            job=self.job,
            in_flight=0,
            buffered_groups=len(self.ready),
            completed_groups=len(self.handed_out),
            dropped_zero_variance=self.dropped_zero_variance,
            invalid_trajectories=0,
        )


def scored_batches(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every batch ``ServerGRPOTrainer`` computed a loss on from now on, as the loss saw it
    (advantages, masks, the step-start logprobs and the importance ratio), its rows back in
    the order the server sent them (TRL shuffles them)."""
    from rollgym.trainer import grpo

    batches: list[dict[str, Any]] = []
    original = grpo.ServerGRPOTrainer._compute_loss

    def spy(self: grpo.ServerGRPOTrainer, model: Any, inputs: dict[str, Any]) -> Any:
        loss = original(self, model, inputs)
        order = grpo.server_order(inputs)
        batches.append({k: v[order] if _per_row(v, order) else v for k, v in inputs.items()})
        return loss

    monkeypatch.setattr(grpo.ServerGRPOTrainer, "_compute_loss", spy)
    return batches


def _per_row(value: Any, order: Any) -> bool:
    return hasattr(value, "ndim") and value.ndim >= 1 and len(value) == len(order)


def fast_config(output_dir: Any, **values: Any) -> TrainerConfig:
    """A trainer config for runs against ``FakeServer``: groups of 4, two a batch, and
    timeouts short enough that a test never waits on a server that will not answer."""
    defaults: dict[str, Any] = dict(
        output_dir=output_dir,
        group_size=4,
        groups_per_batch=2,
        pull_timeout_s=0.1,
        stall_timeout_s=5.0,
    )
    return TrainerConfig(**{**defaults, **values})
