"""The HTTP client: typed calls, and every failure translated into trainer.errors."""

from __future__ import annotations

import random

import httpx
import pytest
import torch
from trainer_fakes import FakeServer, random_group

from rollgym.contract.wire import PullRequest, RolloutJob
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import ClientConfig
from rollgym.trainer.errors import (
    AuthError,
    ProtocolError,
    ServerReplyError,
    ServerUnavailable,
    TrainerError,
    VersionConflict,
)
from rollgym.trainer.weights import SafetensorsBody, WeightPusher


def test_pull_and_ack_round_trip() -> None:
    fake = FakeServer(producer=None)
    groups = [random_group(0, 4, random.Random(i)) for i in range(3)]
    fake.add(*groups)
    with fake.client() as client:
        answer = client.pull(PullRequest(trainer_version=0, max_staleness=1, num_groups=2))
        assert [g.group_id for g in answer.groups] == [g.group_id for g in groups[:2]]
        assert answer.lease_id is not None
        assert client.ack([g.group_id for g in answer.groups]) == 2
    assert fake.acked == {groups[0].group_id, groups[1].group_id}


def test_rollout_job_calls() -> None:
    fake = FakeServer()
    job = RolloutJob(env_id="rollgym/GuessNumber-v0", group_size=4, max_staleness=0)
    with fake.client() as client:
        assert client.start_rollouts(job).job == job
        assert client.rollouts().running
        assert not client.stop_rollouts().running


def test_weight_push_bumps_the_version_and_refuses_a_wrong_expectation() -> None:
    fake = FakeServer(version=3)
    model = torch.nn.Linear(4, 2)
    with fake.client() as client:
        pusher = WeightPusher(client, version=client.policy_version())
        sync = pusher.push(model)
        assert sync.policy_version == 4 == fake.version == pusher.version
        assert sync.bytes == len(SafetensorsBody.of(model))
        torch.testing.assert_close(fake.weights[-1]["weight"], model.weight.detach())
        with pytest.raises(VersionConflict) as conflict:
            client.push_weights(SafetensorsBody.of(model), expected_version=3)
        assert conflict.value.status == 409 and "at 4" in conflict.value.message
    assert fake.version == 4  # the refused update changed nothing


def test_tied_weights_are_sent_once() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8, bias=False))
    model[1].weight = model[0].weight
    from safetensors.torch import load

    assert set(load(b"".join(SafetensorsBody.of(model)))) == {"0.weight"}


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong", 403)])
def test_admin_token_errors_are_auth_errors(token, status) -> None:
    with FakeServer().client(token=token) as client, pytest.raises(AuthError) as error:
        client.ack(["x"])
    assert error.value.status == status


def _mock(handler, reconnect_timeout_s: float = 0.0) -> ServerClient:
    http = httpx.Client(base_url="http://mock", transport=httpx.MockTransport(handler))
    config = ClientConfig(
        url="http://mock", admin_token="t", reconnect_timeout_s=reconnect_timeout_s
    )
    return ServerClient(config, http=http)


def test_unreachable_server_is_server_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with _mock(refuse) as client, pytest.raises(ServerUnavailable):
        client.policy_version()
    assert issubclass(ServerUnavailable, ConnectionError)


def test_wait_until_ready_gives_up_after_its_deadline() -> None:
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("refused", request=request)

    with _mock(refuse) as client, pytest.raises(ServerUnavailable):
        client.wait_until_ready(0.05, poll_s=0.01)
    assert len(calls) >= 2


def test_answers_off_the_wire_schema_are_protocol_errors() -> None:
    garbage = _mock(lambda r: httpx.Response(200, json={"groups": "nope"}))
    with garbage as client, pytest.raises(ProtocolError, match="PullResponse"):
        client.pull(PullRequest(trainer_version=0, max_staleness=0, num_groups=1))
    with (
        _mock(lambda r: httpx.Response(200, text="not json")) as client,
        pytest.raises(ProtocolError),
    ):
        client.policy_version()


def test_error_bodies_become_server_errors_with_code_and_message() -> None:
    body = {"error": "bad_request", "message": "num_groups too large"}
    with (
        _mock(lambda r: httpx.Response(422, json=body)) as client,
        pytest.raises(ServerReplyError) as error,
    ):
        client.pull(PullRequest(trainer_version=0, max_staleness=0, num_groups=1))
    assert (error.value.status, error.value.code) == (422, "bad_request")
    assert "num_groups too large" in str(error.value)
    boom = _mock(lambda r: httpx.Response(500, text="boom"))
    with boom as client, pytest.raises(TrainerError, match="500 http_error"):
        client.rollouts()


class Restarting:
    """A server that is gone for ``down`` calls (refused, then 503 while it starts), then back
    at ``version``; a weight push may land before its answer is lost (``lands``)."""

    def __init__(self, version: int, down: int, *, lands: bool = False) -> None:
        self.version, self.down, self.lands = version, down, lands
        self.pushes: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/admin/weights":
            self.pushes.append(request.headers.get("X-Expected-Version"))
            if self.down > 0:  # the push dies with the server
                self.down -= 1
                self.version += self.lands
                raise httpx.RemoteProtocolError("server went away", request=request)
            self.version += 1
            return httpx.Response(
                200,
                json={"policy_version": self.version, "bytes": 1, "load_s": 0.0,
                      "apply_s": 0.0, "in_flight_policy": "finish"},
            )  # fmt: skip
        if self.down > 0:
            self.down -= 1
            if self.down % 2:
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(503, json={"error": "engine_failure", "message": "starting"})
        return httpx.Response(200, json={"status": "ok", "policy_version": self.version})


def test_a_call_waits_out_a_restarting_server() -> None:
    server = Restarting(version=7, down=2)
    with _mock(server, reconnect_timeout_s=60) as client:
        assert client.policy_version() == 7 and server.down == 0


def test_a_server_gone_longer_than_the_reconnect_timeout_is_unavailable() -> None:
    gone = Restarting(version=7, down=100)
    with (
        _mock(gone, reconnect_timeout_s=0.2) as client,
        pytest.raises((ServerUnavailable, ServerReplyError)),
    ):
        client.policy_version()


@pytest.mark.parametrize(("lands", "pushes", "version"), [(True, 1, 4), (False, 2, 4)])
def test_a_push_whose_answer_is_lost_is_repeated_only_if_it_did_not_land(
    lands, pushes, version
) -> None:
    server = Restarting(version=3, down=1, lands=lands)
    with _mock(server, reconnect_timeout_s=60) as client:
        pusher = WeightPusher(client, version=3)
        sync = pusher.push(torch.nn.Linear(2, 2))
    assert len(server.pushes) == pushes and server.pushes[0] == "3"
    assert sync.policy_version == pusher.version == server.version == version
    assert (sync.server is None) == lands
