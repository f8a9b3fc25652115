"""Schemathesis against the real server's OpenAPI: no input makes it answer 5xx.

``rollgym serve`` (vLLM engine, no sandbox pool) on loopback; every operation of its
OpenAPI schema gets generated inputs, valid and invalid (schemathesis' positive and
negative modes), with the admin token on admin routes and an agent key on the agent
routes (``/v1/``), so both are fuzzed past their auth.
The counts per operation and status class are printed at the end (``-s`` shows them)::

    .venv/bin/python -m pytest tests/e2e/test_server_fuzz.py -s
    ROLLGYM_FUZZ_EXAMPLES=50 .venv/bin/python -m pytest tests/e2e/test_server_fuzz.py -s
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from rollgym.run.server_process import ServerProcess

# cases per operation and mode: make test runs 20 (about 70 s in all; the pulls' default wait
# made 10 take 230 s before `_steer` capped it)
EXAMPLES = int(os.environ.get("ROLLGYM_FUZZ_EXAMPLES", "20"))
GUESS = "rollgym/GuessNumber-v0"
AGENT_KEY = "fuzz-agent-key-000000"
COUNTS: collections.Counter[tuple[str, str]] = collections.Counter()
SECONDS: collections.Counter[str] = collections.Counter()  # time answering, per operation
SERVER_ERRORS: list[str] = []


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    with ServerProcess(
        model_dir=default_model_dir,
        data_dir=root / "server",
        threads=1,
        settings={
            "ROLLGYM_ENGINE__MAX_MODEL_LEN": "512",
            "ROLLGYM_AGENTS__KEYS": json.dumps({"fuzz": AGENT_KEY}),
        },
    ) as process:
        yield process
        _report()


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
def test_no_input_gets_a_server_error(server, mode) -> None:
    """Every operation, ``EXAMPLES`` generated cases each (schemathesis' strategies run
    by Hypothesis here: its own pytest plugin does not support pytest 9)."""
    api = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    agent = {"Authorization": f"Bearer {AGENT_KEY}"}
    for result in api.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],  # a 5xx is reported as found, unshrunk
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case) -> None:
            _steer(case, mode, model=server.model_dir.name)
            auth = agent if case.path.startswith("/v1/") else admin
            started = time.perf_counter()
            response = case.call(headers=auth, timeout=120)
            label = f"{case.method.upper()} {case.path}"
            SECONDS[label] += time.perf_counter() - started
            COUNTS[(label, f"{response.status_code // 100}xx")] += 1
            if response.status_code >= 500:
                SERVER_ERRORS.append(f"{label}: {response.status_code} {response.text[:300]}")
            assert response.status_code < 500, case.as_curl_command(headers=auth)

        try:
            fuzz()
        except Unsatisfiable:  # no invalid input exists (a GET without parameters)
            assert mode is GenerationMode.NEGATIVE, operation.label


def _steer(case, mode: GenerationMode, *, model: str) -> None:
    """Valid cases go deep: they name the served model and a served env (random strings
    would stop at the first check). A pull may wait up to 10 minutes for groups that never
    come: its wait is capped, and set where the case leaves it out (its default, 30 s, made
    the pulls 180 of the positive mode's 200 seconds); an evaluation plays every episode
    before it answers (up to 4,096): it is cut to a few; so are the tokens and choices a
    generation asks for (a long answer tests the engine's speed, not the input's handling)."""
    body = case.body
    if not isinstance(body, dict):
        return
    if case.path == "/admin/buffer/pull":
        body.setdefault("timeout_s", 0.5)
    if isinstance(body.get("timeout_s"), int | float):
        body["timeout_s"] = min(body["timeout_s"], 0.5)
    if case.path == "/admin/evaluations":
        if isinstance(body.get("seeds"), list):
            body["seeds"] = body["seeds"][:3]
        if isinstance(body.get("samples"), int):
            body["samples"] = min(body["samples"], 2)
    for field in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if isinstance(body.get(field), int) and body[field] > 8:
            body[field] = 8  # a long answer is the engine's time, not a new input
    if isinstance(body.get("n"), int) and body["n"] > 2:
        body["n"] = 2
    if mode is GenerationMode.POSITIVE:
        if "model" in body:
            body["model"] = model
        if "env_id" in body:
            body["env_id"] = GUESS


def _report() -> None:
    total = sum(COUNTS.values())
    print(f"\nfuzz: {total} cases, {len(SERVER_ERRORS)} server errors (5xx)")
    for (label, status), count in sorted(COUNTS.items()):
        print(f"  {label:45s} {status}: {count}")
    print("seconds answering, per operation (both modes), the slowest first:")
    for label, seconds in SECONDS.most_common():
        print(f"  {label:45s} {seconds:6.1f} s")
    for line in SERVER_ERRORS:
        print(f"  5xx: {line}")
