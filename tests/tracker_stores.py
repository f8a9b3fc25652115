"""Each experiment tracker's series, read back from its own local store with its own reader:
``tag -> [(step, value), ...]``. The unit tier (tests/unit/test_trainer_trackers.py) and the
e2e tier (tests/e2e/test_run_user_env_e2e.py) both check a run's series this way.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

Series = dict[str, list[tuple[int, float]]]


def tensorboard_series(output_dir: Path) -> Series:
    """TensorBoard's ``EventAccumulator`` on the one run under ``output_dir/runs``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run,) = (output_dir / "runs").iterdir()
    events = EventAccumulator(str(run))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def wandb_series(output_dir: Path) -> Series:
    """The history records of the one offline W&B run under ``output_dir/wandb``, decoded
    with W&B's own protobuf (``wandb_internal_pb2.Record``), stepped by transformers'
    ``train/global_step``."""
    from wandb.proto import wandb_internal_pb2

    (log,) = (output_dir / "wandb").glob("offline-run-*/run-*.wandb")
    series: Series = {}
    for data in _transaction_log(log.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {
            item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in record.history.item
        }
        for tag, value in row.items():
            if isinstance(value, int | float) and "train/global_step" in row:
                series.setdefault(tag, []).append((int(row["train/global_step"]), float(value)))
    return series


def _transaction_log(raw: bytes) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
    then LevelDB's log format (32 KiB blocks; each chunk a 7-byte header of crc32c, length
    and type: 1 whole, 2 first, 3 middle, 4 last). wandb 0.31 reads it only in its Go core
    (the Python ``DataStore`` is gone), so the tests frame it here; the checksums go unchecked."""
    ident, magic, version = struct.unpack("<4sHB", raw[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    records, parts, at, block = [], b"", 7, 32768
    while at + 7 <= len(raw):
        if block - at % block < 7:  # a block's tail too short for a header is padding
            at += block - at % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[at : at + 7])
        if kind == 0:  # zeros: the rest of a block the writer did not fill
            at += block - at % block
            continue
        assert at + 7 + length <= len(raw), f"{len(raw) - at} bytes left of a {length}-byte chunk"
        parts += raw[at + 7 : at + 7 + length]
        at += 7 + length
        if kind in (1, 4):
            records.append(parts)
            parts = b""
    return records


def mlflow_series(output_dir: Path) -> Series:
    """Every metric of the one finished run of experiment ``rollgym`` in
    ``output_dir/mlflow.db``, through MLflow's own client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(output_dir / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("rollgym")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED", run.info.status
    return {
        key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        for key in run.data.metrics
    }


def trackio_series(run_name: str) -> Series:
    """The logs of trackio's run ``run_name`` in project ``rollgym``, read with trackio's own
    storage (in the store ``TRACKIO_DIR`` named when this process first imported trackio)."""
    from trackio.sqlite_storage import SQLiteStorage

    assert run_name in SQLiteStorage.get_runs("rollgym"), SQLiteStorage.get_runs("rollgym")
    series: Series = {}
    for row in SQLiteStorage.get_logs("rollgym", run_name):
        for tag, value in row.items():
            if isinstance(value, int | float) and "train/global_step" in row:
                series.setdefault(tag, []).append((int(row["train/global_step"]), float(value)))
    return series
