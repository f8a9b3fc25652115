"""Elastic servers: how long `cluster scale` takes to add a server and to remove one.

    .venv/bin/python -m bench.cluster_scale [--cycles 3]

One cluster (``rollgym cluster up``, the default model, a local Ray sized for 2) starts
with 1 server; each cycle scales it to 2 and back to 1, idle (no job, no session):

* **scale-up**: from ``POST /admin/cluster/scale {"servers": 2}`` to the first call the new
  server answers through the router (``GET /v1/models``; new work takes turns between
  equal servers, so the second call at the latest goes to it): Ray starts the actor, the
  server starts its engine, catches up to the cluster's version, joins the rotation;
* **scale-down**: ``{"servers": 1}`` until it answers: the server drains (nothing to
  drain here) and Ray stops it.

The median of the cycles, with the lowest and highest.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from rollgym.cluster.status import SCALE
from rollgym.contract import api
from rollgym.contract.paths import default_model_dir
from rollgym.run.cluster_process import ClusterProcess


def first_answer_from(http: httpx.Client, server: str) -> None:
    while True:
        answer = http.get(api.MODELS.path)
        if answer.status_code == 200 and answer.headers.get("x-rollgym-server") == server:
            return


def cycle(http: httpx.Client) -> tuple[float, float]:
    started = time.perf_counter()
    http.post(SCALE.path, json={"servers": 2}).raise_for_status()
    first_answer_from(http, "s1")
    up = time.perf_counter() - started
    started = time.perf_counter()
    http.post(SCALE.path, json={"servers": 1}).raise_for_status()
    return up, time.perf_counter() - started


def main(args: argparse.Namespace) -> None:
    token = secrets.token_urlsafe(24)
    settings = {"ROLLGYM_ENGINE__MAX_MODEL_LEN": "512", "ROLLGYM_CLUSTER__MAX_SERVERS": "2"}
    ups, downs = [], []
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
        ClusterProcess(
            servers=1, model_dir=args.model_dir, data_dir=Path(tmp), admin_token=token,
            settings=settings, threads=1,
        ) as cluster,
        httpx.Client(
            base_url=cluster.url, headers={"Authorization": f"Bearer {token}"}, timeout=900
        ) as http,
    ):  # fmt: skip
        for n in range(args.cycles):
            up, down = cycle(http)
            ups.append(up)
            downs.append(down)
            print(f"cycle {n + 1}: scale-up {up:.1f} s, scale-down {down:.1f} s", flush=True)
    for name, values in (("scale-up to first served call", ups), ("scale-down", downs)):
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"{name:<32}{mid:8.1f} s  [{low:.1f}-{high:.1f}] over {len(values)} cycles")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--model-dir", type=Path, default=default_model_dir())
    main(parser.parse_args())
