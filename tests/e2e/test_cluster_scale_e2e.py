"""`rollgym cluster scale` during a run: 1 -> 3 -> 1 servers on a local Ray, the default
model, while the trainer trains from the router.

Each new server must come up at the cluster's version before it takes work (no
trajectory of the run mixes versions beyond the window), and when it leaves it drains:
the run loses no step, and the trainer keeps pulling through the change.
"""

from __future__ import annotations

import threading
import time

import httpx
from test_cluster_e2e import GROUP_SIZE, GROUPS, job

from rollgym.cluster.status import SCALE, STATUS, ClusterStatus
from rollgym.run.cluster_process import ClusterProcess
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import train

STEPS = 8
PEAK = 3  # servers at the top of the cycle


class Scaler:
    """The trainer's printer, called after every step: grows the cluster to ``PEAK`` at the
    first (the step waits while the servers start; the job keeps sampling on s0), and from the
    third starts shrinking it back in a thread while the run goes on pulling."""

    def __init__(self, cluster: ClusterProcess):
        self.http = httpx.Client(
            base_url=cluster.url,
            headers={"Authorization": f"Bearer {cluster.admin_token}"},
            timeout=900,
        )
        self.calls = 0
        self.grown: ClusterStatus | None = None
        self.shrunk: ClusterStatus | None = None
        self.scale_up_s: float | None = None
        self.shrinking: threading.Thread | None = None
        self.error: BaseException | None = None

    def _scale(self, servers: int) -> ClusterStatus:
        answer = self.http.post(SCALE.path, json={"servers": servers})
        answer.raise_for_status()
        return ClusterStatus.model_validate_json(answer.content)

    def __call__(self, text: str) -> None:
        self.calls += 1
        if self.grown is None:
            started = time.perf_counter()
            self.grown = self._scale(PEAK)
            self.scale_up_s = time.perf_counter() - started
        elif self.calls >= 3 and self.shrinking is None:
            self.shrinking = threading.Thread(target=self._shrink, daemon=True)
            self.shrinking.start()

    def _shrink(self) -> None:
        try:
            self.shrunk = self._scale(1)
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_scale_1_3_1_during_a_run(tmp_path, default_model_dir) -> None:
    settings = {
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_CLUSTER__HEALTH_INTERVAL_S": "0.5",
        "ROLLGYM_CLUSTER__MAX_SERVERS": str(PEAK),
        "ROLLGYM_CLUSTER__DRAIN_TIMEOUT_S": "300",
        "ROLLGYM_CLUSTER__MEMORY_PER_SERVER_GIB": "2",
    }
    with (
        ClusterProcess(
            servers=1, model_dir=default_model_dir, data_dir=tmp_path, threads=1, settings=settings
        ) as cluster,
        ServerClient(cluster.client_config(request_timeout_s=120.0)) as client,
    ):
        scaler = Scaler(cluster)
        config = TrainerConfig(
            output_dir=tmp_path / "run", group_size=GROUP_SIZE, groups_per_batch=GROUPS,
            max_staleness=1, total_steps=STEPS, learning_rate=1e-3, pull_timeout_s=5.0,
            stall_timeout_s=600.0,
        )  # fmt: skip
        result = train(
            config, client, cluster.model_dir, on_ready=lambda: client.start_rollouts(job()),
            printer=scaler,
        )  # fmt: skip
        assert scaler.shrinking is not None
        scaler.shrinking.join(timeout=900)
        client.stop_rollouts()
        assert scaler.error is None, scaler.error
        assert scaler.grown is not None and scaler.shrunk is not None
        grown = scaler.grown.servers
        assert [s.state for s in grown] == ["serving"] * PEAK
        # the new servers took traffic only at the cluster's version
        assert {s.policy_version for s in grown} == {scaler.grown.policy_version}
        assert [s.name for s in scaler.shrunk.servers] == ["s0"]
        assert result.steps == STEPS  # nothing the run needed was lost
        assert all(r.version_lag_max <= 1 for r in result.records)  # one window, no mix
        final = httpx.get(
            cluster.url + STATUS.path,
            headers={"Authorization": f"Bearer {cluster.admin_token}"},
            timeout=30,
        )
        assert ClusterStatus.model_validate_json(final.content).servers[0].state == "serving"
        print(f"scale-up 1 -> {PEAK} (start, catch up, in rotation): {scaler.scale_up_s:.1f} s")
