"""The client side of ``bench.http``, in a process of its own so that its costs stay out of
the server's. It reads one command a line on stdin and answers one JSON line on stdout:

    calls N          -> [[round_trip_s, total_ms, engine_ms, http_ms], ...]  (N completions)
    push DIR V       -> [body_s, sync_s, save_s]: the trainer's push (``WeightPusher``) of the
                        model at DIR (loaded with transformers) to a server at version V, and
                        what ``safetensors.torch.save`` (the push before) takes to build it
    quit

    .venv/bin/python -m bench.loopback_client URL MODEL AGENT_KEY ADMIN_TOKEN
"""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Any

import httpx

PROMPT = [1, 2, 3, 4, 5]


def server_timing(header: str) -> dict[str, float]:
    """``total;dur=1.2, engine;dur=1.0, http;dur=0.2`` -> ``{"total": 1.2, ...}``."""
    parts = (part.strip().split(";dur=") for part in header.split(","))
    return {name: float(value) for name, value in parts}


def calls(client: httpx.Client, model: str, agent_key: str, n: int) -> list[list[float]]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 1}
    headers = {"Authorization": f"Bearer {agent_key}"}
    out = []
    for _ in range(n):
        started = time.perf_counter()
        answer = client.post("/v1/completions", json=body, headers=headers)
        round_trip = time.perf_counter() - started
        answer.raise_for_status()
        timing = server_timing(answer.headers["server-timing"])
        out.append([round_trip, timing["total"], timing["engine"], timing["http"]])
    return out


@functools.cache
def trainer_model(model_dir: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def push(url: str, admin_token: str, model_dir: str, version: int) -> list[float]:
    from safetensors.torch import save

    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig
    from rollgym.trainer.weights import WeightPusher

    model = trainer_model(model_dir)
    with ServerClient(ClientConfig(url=url, admin_token=admin_token)) as trainer:
        sync = WeightPusher(trainer, version=version).push(model)
    started = time.perf_counter()
    save({name: p.detach().contiguous() for name, p in model.named_parameters()})
    return [sync.serialize_s, sync.sync_s, time.perf_counter() - started]


def main() -> None:
    url, model, agent_key, admin_token = sys.argv[1:5]
    with httpx.Client(base_url=url) as client:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "quit":
                return
            if command == "calls":
                answer: object = calls(client, model, agent_key, int(args[0]))
            else:
                answer = push(url, admin_token, args[0], int(args[1]))
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
