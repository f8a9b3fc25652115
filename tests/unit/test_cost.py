"""The cost board: rates, device-seconds per 1k tokens, the long tail, savings, /metrics."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from server_fakes import ADMIN, engine_factory, in_process, settings

from rollgym.contract.dashboard import DashboardData, TrainerReport
from rollgym.contract.wire import Trajectory, TrajectoryGroup, TurnRecord
from rollgym.engine.base import Generation
from rollgym.engine.fake import FakeEngine
from rollgym.engine.vllm.speculation import (
    EngineMeter,
    SpeculationController,
    SpeculationGate,
    Window,
    WindowRule,
)
from rollgym.server.app import create_app
from rollgym.server.config import CostConfig, DashboardConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.observability.cost import CostMeter, DeviceClock, LongTail


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Device:
    """A device clock that uses ``per_s`` device-seconds per second of ``clock``."""

    kind = "cpu"
    devices = 2

    def __init__(self, clock: Clock, per_s: float):
        self.clock, self.per_s = clock, per_s

    def seconds(self) -> float:
        return self.clock.now * self.per_s


def generation(tokens: int, prompt: int = 100, cached: int = 0, prefill_s: float = 0.0):
    return Generation(
        token_ids=[1] * tokens,
        logprobs=[-0.1] * tokens,
        finish_reason="stop",
        policy_version=0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        model_s=0.5,
        prefill_s=prefill_s,
    )


def meter(clock: Clock, **kw) -> CostMeter:
    return CostMeter(
        CostConfig(price_per_hour=3.6, window_s=10), device=Device(clock, 1.0), clock=clock, **kw
    )


def test_rates_device_seconds_and_prices() -> None:
    clock = Clock()
    cost = meter(clock)
    cost.tick()
    for _ in range(10):
        clock.now += 1
        cost.observe(generation(200, prompt=100, cached=60, prefill_s=0.04))
        cost.tick()
    board = cost.board(sampling_busy_s=8.0, training_busy_s=2.0, trained_samples=20)
    assert board.generated_tokens_per_s == pytest.approx(200.0)
    assert board.prompt_tokens_per_s == pytest.approx(100.0)
    assert board.device_s_per_1k_tokens == pytest.approx(5.0)  # 10 CPU-s for 2,000 tokens
    assert board.machine_s_per_1k_tokens == pytest.approx(2.5)  # 2 cores
    assert board.cost_per_1k_tokens == pytest.approx(2.5 * 3.6 / 3600)
    assert board.cost_per_trained_sample == pytest.approx(10 / 20 * 3.6 / 3600)
    assert board.sampling_training_ratio == pytest.approx(4.0)
    assert board.prefix_cache_hit_rate == pytest.approx(0.6)
    [prefix, spec, precision] = board.savings
    # 600 cached tokens x (0.4 s / 400 prefilled tokens), x the engine's share of the machine
    # (10 CPU-s over 5 s of generation on 2 cores: all of it)
    assert prefix.machine_s == pytest.approx(0.6) and prefix.worth == pytest.approx(0.6e-3)
    assert spec.machine_s is None and precision.machine_s is None


def test_the_device_clock_keeps_the_cpu_of_children_that_ended() -> None:
    # an engine replaced by a speculation switch is a child that ends: its CPU still counts
    clock = DeviceClock(gpus=0)
    before = clock.seconds()
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert clock.seconds() - before >= 0.3


def test_the_window_drops_old_ticks() -> None:
    clock = Clock()
    cost = meter(clock)
    for step in range(30):
        clock.now += 1
        cost.observe(generation(100 if step < 20 else 300))
        cost.tick()
    board = cost.board(sampling_busy_s=0.0, training_busy_s=0.0, trained_samples=0)
    assert board.window_s <= 11
    assert board.generated_tokens_per_s == pytest.approx(300.0)
    assert board.cost_per_trained_sample is None and board.sampling_training_ratio is None


def test_no_price_no_costs() -> None:
    clock = Clock()
    cost = CostMeter(CostConfig(), device=Device(clock, 1.0), clock=clock)
    cost.observe(generation(10))
    cost.tick()
    board = cost.board(sampling_busy_s=1.0, training_busy_s=1.0, trained_samples=1)
    assert board.cost_per_1k_tokens is None and board.price_per_hour is None


def test_speculation_and_precision_savings() -> None:
    clock = Clock()
    engine_meter = EngineMeter(clock=clock)
    gate = SpeculationGate(min_acceptance=0.3, tolerance=0.05, probe_after_s=10)
    gate.close_window(
        Window(1000, 1.0, shadow_drafted=300, shadow_accepted=210, shadow_tokens=400), now=0
    )  # 400 tokens in 190 steps: 2.1x, at a step cost of 1
    gate.close_window(Window(1500, 1.0, drafted=300, accepted=240), now=1)
    controller = SpeculationController(gate, engine_meter, WindowRule(100, 1.0), _noop)
    cost = meter(
        clock,
        engine_meter=engine_meter,
        speculation=controller,
        precision_speedup=1.5,
        precision_kl=2e-4,
    )
    engine_meter.step(generated=0, prompt=0, running=1)
    clock.now += 2  # 2 busy seconds, 2 CPU-seconds on 2 cores: the engine's share is 1/2
    engine_meter.step(generated=2500, prompt=0, running=0, drafted=300, accepted=240)
    cost.tick()
    board = cost.board(sampling_busy_s=1.0, training_busy_s=1.0, trained_samples=1)
    saved = {s.name: s.machine_s for s in board.savings}
    # 1 busy s drafting at 1.5x the plain speed saved 0.5 s; x the engine's share
    assert saved["speculative_decoding"] == pytest.approx(0.5 * 0.5)
    assert saved["precision"] == pytest.approx(2.0 * 0.5 * 0.5)  # 2 busy s, 1.5x faster
    assert board.precision_kl == 2e-4
    view = board.speculation
    assert view.enabled and view.drafting and view.acceptance == pytest.approx(0.8)
    assert (view.drafted_tokens, view.accepted_tokens) == (300, 240)
    assert view.plain_tokens_per_s == 1000 and view.drafting_tokens_per_s == 1500
    assert view.state == "on" and view.shadow_acceptance == pytest.approx(0.7)
    assert view.would_be_speedup == pytest.approx(400 / 190)
    assert view.draft_step_cost == pytest.approx(1500 / 1260 * 1000 / 1500)  # 1260 steps


async def _noop(on: bool) -> None:
    pass


def _episode(start: float, end: float) -> Trajectory:
    return Trajectory(
        id=f"{start}-{end}",
        group_id="g",
        env_id="e",
        prompt_ids=[1],
        completion_ids=[],
        logprobs=[],
        loss_mask=[],
        reward=0.0,
        terminated=True,
        truncated=False,
        min_version=0,
        max_version=0,
        turns=[
            TurnRecord(
                index=0,
                policy_version=0,
                context_tokens=1,
                completion_tokens=0,
                env_tokens=0,
                model_s=end - start,
            )
        ],
        created_at=end,
    )


def test_the_long_tail_is_the_wait_on_each_groups_slowest_tenth() -> None:
    tail = LongTail()
    tail.add(
        TrajectoryGroup(
            group_id="a",
            env_id="e",
            trajectories=[_episode(0, 2), _episode(0, 3), _episode(0, 4), _episode(0, 10)],
        )
    )
    assert tail.share == pytest.approx(6 / 10)  # waited from 4 to 10 on the slowest one
    tail.add(TrajectoryGroup(group_id="b", env_id="e", trajectories=[_episode(0, 5)]))
    assert tail.share == pytest.approx(6 / 10)  # a group of one waits on nobody


async def test_the_board_reaches_the_dashboard_and_metrics(tmp_path, default_model_dir) -> None:
    codec = ChatCodec.from_model_dir(default_model_dir)
    engine = FakeEngine(lambda prompt: [*codec.encode("5"), codec.eos_id])
    app = create_app(
        settings(
            tmp_path,
            dashboard=DashboardConfig(interval_s=0.05),
            cost=CostConfig(price_per_hour=2.0),
        ),
        engine_factory=engine_factory(engine),
    )
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 4,
        "groups_per_batch": 1,
        "drop_zero_variance": False,
    }
    async with in_process(app) as client:
        await client.post("/admin/rollouts", json=job, headers=ADMIN)
        pull = {"trainer_version": 0, "max_staleness": 1, "num_groups": 1, "timeout_s": 20}
        pulled = (await client.post("/admin/buffer/pull", json=pull, headers=ADMIN)).json()
        await client.delete("/admin/rollouts", headers=ADMIN)
        now = time.time()
        report = TrainerReport(
            step=1, at=now, policy_version=0, trajectories=4, busy_spans=[(now - 0.01, now)]
        )
        await client.post("/admin/dashboard/trainer", json=report.model_dump(), headers=ADMIN)
        data = DashboardData.model_validate((await client.get("/dashboard/data")).json())
        metrics = (await client.get("/metrics")).text
    assert pulled["groups"]
    board = data.cost
    assert board is not None and board.device == "cpu" and board.price_per_hour == 2.0
    assert board.trained_samples == 4 and board.cost_per_trained_sample is not None
    assert board.long_tail_share is not None and board.sampling_training_ratio is not None
    assert not board.speculation.enabled  # the fake engine has no drafter
    for name in (
        "rollgym_generated_tokens_per_second",
        "rollgym_long_tail_share",
        "rollgym_cost_per_trained_sample",
        "rollgym_spec_decode_draft_tokens_total",
    ):
        assert name in metrics, name
