"""A push by broadcast against the same push uploaded, to the same server, in the same run.

    .venv/bin/python -m bench.weight_broadcast [--models rollgym-tiny,smollm2-135m-instruct]
                                               [--runs 3] [--pushes 10]

Per model and run: one real ``rollgym serve`` on loopback with
``engine.weight_transfer='gloo'`` (it takes uploads too), and in this process the model's
weights pushed ``--pushes`` times each way, alternately: uploaded over HTTP (the
baseline: ``trainer.weights``) and broadcast over gloo (``trainer.broadcast``, the CPU twin
of the NCCL path: the same vLLM engines, gloo on the wire). Both with the canary. Rows: the
update as the trainer sees it (``WeightSync.sync_s``), of it the server's receive and load
(``load_s``) and its pause (``apply_s``); the median over a run's pushes, then the median
over runs with min-max.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.lora import spread
from bench.server import print_table
from rollgym.contract import paths

WAYS = ("upload", "broadcast")
ROWS = (  # key, label, scale, format
    ("sync_s", "update (ms): send, checks, load, apply, canary", 1e3, ".1f"),
    ("load_s", "of it received and loaded before the pause (ms)", 1e3, ".1f"),
    ("apply_s", "of it the server's pause (ms)", 1e3, ".2f"),
)


def one_run(model_dir: Path, pushes: int, root: Path) -> dict[str, dict[str, float]]:
    """The median of each row over ``pushes`` pushes each way, against one fresh server."""
    from transformers import AutoModelForCausalLM

    from rollgym.run.server_process import ServerProcess, free_port
    from rollgym.trainer.broadcast import WeightBroadcaster
    from rollgym.trainer.canary import CanaryConfig
    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import BroadcastConfig
    from rollgym.trainer.weights import WeightPusher

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    settings = {"ROLLGYM_ENGINE__WEIGHT_TRANSFER": "gloo", "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024"}
    with (
        ServerProcess(model_dir=model_dir, data_dir=root, settings=settings, threads=1) as server,
        ServerClient(server.client_config()) as client,
    ):
        group = BroadcastConfig(backend="gloo", port=free_port(), timeout_s=120)
        broadcast = WeightBroadcaster.open(client, group)
        version = client.policy_version()
        pushers = {
            "upload": WeightPusher(client, version=version, canary=CanaryConfig()),
            "broadcast": WeightPusher(
                client, version=version, canary=CanaryConfig(), broadcast=broadcast
            ),
        }
        try:
            for _ in range(pushes):
                for pusher in pushers.values():
                    pusher.version = client.policy_version()  # the other way moved it
                    sync = pusher.push(model)
                    assert sync.server is not None and sync.server.canary is not None
                    assert sync.server.canary.passed, sync.server.canary
        finally:
            broadcast.close()
    return {way: medians(pusher) for way, pusher in pushers.items()}


def medians(pusher) -> dict[str, float]:
    syncs = pusher.history
    return {
        "sync_s": statistics.median(s.sync_s for s in syncs),
        "load_s": statistics.median(s.server.load_s for s in syncs),
        "apply_s": statistics.median(s.server.apply_s for s in syncs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="rollgym-tiny,smollm2-135m-instruct")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pushes", type=int, default=10, help="timed pushes each way per run")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        model_dir = paths.models_dir() / name
        runs = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="bench-broadcast-") as root:
                runs.append(one_run(model_dir, args.pushes, Path(root)))
        for key, label, scale, fmt in ROWS:
            cells = [spread([r[way][key] * scale for r in runs], fmt) for way in WAYS]
            ratio = [r["broadcast"][key] / r["upload"][key] for r in runs]
            shown = spread(ratio, ".2f") + "x" if all(ratio) else "-"
            rows.append((name, label, *cells, shown))
    print_table(rows, ("model", "row", "upload", "broadcast (gloo)", "broadcast / upload"))


if __name__ == "__main__":
    main()
