"""The metrics recorder: counts, sums and percentiles per label set."""

from __future__ import annotations

from rollgym.sandboxes import metrics as m
from rollgym.sandboxes.metrics import MetricsRecorder, TimingSummary


def test_recorder_summarizes_timings_and_counts_events() -> None:
    recorder = MetricsRecorder(window=1000)
    for i in range(1, 101):
        recorder.observe(m.ROUND_TRIP, i / 1000, {"op": "python"})
    recorder.observe(m.ROUND_TRIP, 1.0, {"op": "shell"})
    recorder.increment(m.DEATHS, {"reason": "oom"})
    recorder.increment(m.DEATHS, {"reason": "oom"})
    snap = recorder.snapshot()
    python = snap["sandbox_round_trip_seconds{op=python}"]
    assert isinstance(python, TimingSummary)
    assert python.count == 100 and abs(python.total_s - 5.05) < 1e-9
    assert abs(python.p50_s - 0.0505) < 1e-3 and abs(python.p99_s - 0.099) < 2e-3
    assert snap["sandbox_round_trip_seconds{op=shell}"] == TimingSummary(1, 1.0, 1.0, 1.0, 1.0)
    assert snap["sandbox_deaths_total{reason=oom}"] == 2


def test_percentiles_cover_the_window_but_totals_cover_everything() -> None:
    recorder = MetricsRecorder(window=10)
    for value in [100.0] * 10 + [1.0] * 10:
        recorder.observe(m.RESET, value)
    summary = recorder.snapshot()[m.RESET]
    assert isinstance(summary, TimingSummary)
    assert summary.count == 20 and summary.total_s == 1010.0
    assert summary.p99_s == 1.0
