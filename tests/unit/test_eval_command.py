"""``rollgym eval``: pass@k and infrastructure failures counted, bad input in one line.

The figures are checked through ``evaluate_server`` against the fake server (which hands
out the groups a test put in); the real twin is tests/e2e/test_eval_e2e.py.
"""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest
from trainer_fakes import FakeServer, make_trajectory

from rollgym.cli import main
from rollgym.contract.wire import SamplingSettings, TrajectoryGroup
from rollgym.trainer.evaluate import evaluate_server, evaluation_of


def group(
    seed: int, rewards: list[float], *, version: int = 0, invalid: int = 0
) -> TrajectoryGroup:
    group_id = uuid.uuid4().hex
    episodes = [
        make_trajectory(group_id=group_id, version=version, first_turn=[5, 6], reward=r)
        for r in rewards
    ]
    episodes += [
        make_trajectory(group_id=group_id, version=version, first_turn=[5], valid=False)
        for _ in range(invalid)
    ]
    episodes = [t.model_copy(update={"task_seed": seed}) for t in episodes]
    return TrajectoryGroup(group_id=group_id, env_id="e", task_seed=seed, trajectories=episodes)


def test_pass_at_k_counts_a_seed_solved_by_any_sample() -> None:
    groups = [
        g.trajectories for g in (group(1, [1, 0, 0]), group(2, [0, 0, 0]), group(3, [1, 1, 1]))
    ]
    evaluation = evaluation_of(groups, 3)
    assert (evaluation.per_sample.successes, evaluation.per_sample.episodes) == (4, 9)
    assert (evaluation.pass_at_k.successes, evaluation.pass_at_k.episodes) == (2, 3)
    assert evaluation.pass_at_k.low < 2 / 3 < evaluation.pass_at_k.high
    assert evaluation.summary()["pass@3"]["rate"] == pytest.approx(2 / 3)


def test_an_evaluation_counts_infrastructure_failures_and_never_reruns_them() -> None:
    server = FakeServer(producer=None, version=3)
    server.evaluated = {10: group(10, [1.0], invalid=1), 11: group(11, [0.0, 1.0])}
    with server.client() as client:
        evaluation = evaluate_server(
            client,
            env_id="e",
            env_kwargs={"low": 1},
            seeds=[10, 11],
            samples=2,
            max_turns=3,
            sampling=SamplingSettings(temperature=0.5),
        )
    [request] = server.evaluations  # one call: nothing played again
    assert (request.seeds, request.samples, request.env_kwargs) == ([10, 11], 2, {"low": 1})
    assert request.sampling.temperature == 0.5
    assert evaluation.infra_failures == 1
    assert (evaluation.per_sample.successes, evaluation.per_sample.episodes) == (2, 3)
    assert (evaluation.pass_at_k.successes, evaluation.pass_at_k.episodes) == (2, 2)
    assert server.job is None and not server.handed_out  # no rollout job, no buffer


def test_with_progress_the_seeds_go_in_parts_each_followed_by_a_counted_line() -> None:
    server = FakeServer(producer=None)
    server.evaluated = {seed: group(seed, [float(seed % 2)]) for seed in range(130)}
    lines: list[str] = []
    with server.client() as client:
        evaluation = evaluate_server(
            client, env_id="e", env_kwargs={}, seeds=range(130), max_turns=1,
            sampling=SamplingSettings(), progress=lines.append,
        )  # fmt: skip
    assert [len(r.seeds) for r in server.evaluations] == [64, 64, 2]
    assert [r.seeds[0] for r in server.evaluations] == [0, 64, 128]
    assert [line.split(",")[0] for line in lines] == [
        "  evaluated 64/130 episodes",
        "  evaluated 128/130 episodes",
        "  evaluated 130/130 episodes",
    ]
    assert lines[-1].endswith("about 0m00s left")
    assert (evaluation.per_sample.successes, evaluation.per_sample.episodes) == (65, 130)


def _model_dir(tmp_path: Path) -> Path:
    """Enough of a model directory for the checks before an engine starts."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def _eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["eval", *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "/nonexistent/model"], "not a model directory"),
        (["--env", "rollgym/NoSuchEnv-v0"], "no environment"),
        (["--env-kwargs", "{bad json"], "--env-kwargs is not JSON"),
        (["--samples", "0"], "at least 1"),
    ],
)
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, argv, needle) -> None:
    model = _model_dir(tmp_path)
    status, out, err = _eval(capsys, "--model", str(model), *argv)
    assert status == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_server_that_does_not_answer_is_one_line(capsys) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status, _, err = _eval(capsys, "--server", f"http://127.0.0.1:{port}", "--episodes", "2")
    assert status == 2 and "does not answer" in err and len(err.strip().splitlines()) == 1


def test_json_output_is_one_object(tmp_path, capsys, monkeypatch) -> None:
    from rollgym.evaluation import commands

    fake = evaluation_of([group(1, [1.0, 0.0]).trajectories], 2)
    monkeypatch.setattr(commands, "_in_engine", lambda args, model_dir, task: fake)
    model = _model_dir(tmp_path)
    status, out, _ = _eval(capsys, "--model", str(model), "--samples", "2", "--json")
    figures = json.loads(out)
    assert status == 0 and figures["pass@2"]["successes"] == 1
    assert figures["success"]["episodes"] == 2 and figures["infra_failures"] == 0


def test_another_env_starts_without_the_guess_games_kwargs() -> None:
    from rollgym.cli import _build_parser
    from rollgym.evaluation.commands import _task

    def task(*argv: str):
        return _task(_build_parser().parse_args(["eval", *argv]))

    assert task().env_kwargs == {"low": 1, "high": 8, "strict": True, "feedback": "range"}
    assert task("--env", "rollgym/Compute-v0").env_kwargs == {}  # was: GuessNumber's, refused
    given = task("--env", "rollgym/Compute-v0", "--env-kwargs", '{"tool": false}')
    assert given.env_kwargs == {"tool": False}


def test_kwargs_the_env_refuses_are_one_line_and_status_2(tmp_path, capsys, monkeypatch) -> None:
    """The env is made once the engine runs (``_in_engine``); its refusal is the server's
    ``BadRequest``, printed as one line (the real engine's twin: tests/e2e/test_eval_e2e.py)."""
    from rollgym.evaluation import commands
    from rollgym.server.errors import BadRequest

    def refused(*_: object) -> None:
        raise BadRequest("rollgym/Compute-v0 cannot be made with env_kwargs ['low']")

    monkeypatch.setattr(commands, "_in_engine", refused)
    model = _model_dir(tmp_path)
    argv = ("--model", str(model), "--env", "rollgym/Compute-v0", "--env-kwargs", '{"low": 1}')
    status, out, err = _eval(capsys, *argv)
    assert status == 2 and out == ""
    assert err == "rollgym eval: rollgym/Compute-v0 cannot be made with env_kwargs ['low']\n"
