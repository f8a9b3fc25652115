"""The server's own timing: each answer says how long it took in the server and how much
of that was the engine's, so that the overhead is read without the client's cost."""

from __future__ import annotations

import threading

import pytest
from server_fakes import engine_factory, in_process, settings

from rollgym.engine.fake import FakeEngine
from rollgym.server.app import create_app
from rollgym.server.http.offload import INLINE_TOKENS, by_size
from rollgym.server.observability.timing import RequestClock, engine_span


def timing(header: str) -> dict[str, float]:
    parts = (part.split(";dur=") for part in header.split(", "))
    return {name: float(value) for name, value in parts}


async def test_an_answer_splits_its_time_between_the_engine_and_the_rest(tmp_path, codec) -> None:
    engine = FakeEngine(lambda prompt: [*codec.encode("5"), codec.eos_id], latency_s=0.05)
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        body = {"model": "rollgym-tiny", "prompt": [1, 2, 3], "max_tokens": 4}
        answer = await client.post("/v1/completions", json=body)
    assert answer.status_code == 200
    read = timing(answer.headers["server-timing"])
    assert read["engine"] >= 50.0
    assert read["total"] >= read["engine"]
    assert read["http"] == pytest.approx(read["total"] - read["engine"], abs=0.002)


async def test_a_refused_request_is_timed_too_with_no_engine_time(client) -> None:
    answer = await client.post("/v1/completions", json={"model": "rollgym-tiny"})
    assert answer.status_code == 422
    read = timing(answer.headers["server-timing"])
    assert read["engine"] == 0.0 and read["http"] == read["total"] >= 0.0


def test_engine_spans_that_overlap_count_once_and_an_open_one_counts_until_now() -> None:
    clock = RequestClock(started=10.0)
    clock.enter(10.1)
    clock.leave(10.3)  # 0.2
    clock.enter(10.4)
    clock.enter(10.5)
    clock.leave(10.6)
    clock.leave(10.7)  # 0.3: two overlapping generations
    assert clock.engine_s(10.8) == pytest.approx(0.5)
    clock.enter(11.0)
    assert clock.engine_s(11.5) == pytest.approx(1.0)  # a streamed answer's open span


def test_an_engine_span_outside_a_request_records_nothing() -> None:
    with engine_span():
        pass


async def test_short_work_stays_on_the_loop_and_long_work_goes_to_a_thread() -> None:
    loop_thread = threading.get_ident()
    short = await by_size(INLINE_TOKENS, threading.get_ident)
    long = await by_size(INLINE_TOKENS + 1, threading.get_ident)
    assert short == loop_thread and long != loop_thread
