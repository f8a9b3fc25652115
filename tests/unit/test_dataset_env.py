"""Tasks from a data set: rows read from local JSONL and Parquet, each verifier's scores,
the judge's cache, counts and failures. The boxes are fake (``FakeSandboxPool``) and the
judge's server is an httpx ``MockTransport``; the real twins: the tests verifier in real
boxes (tests/docker/test_dataset_docker.py) and the judge against the rollout server's
own OpenAI endpoint (tests/e2e/test_harbor_training_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollgym.envs.dataset import register, register_dataset
from rollgym.envs.dataset.judge import Judge
from rollgym.envs.dataset.rows import DatasetError, load_rows
from rollgym.envs.dataset.verifiers import JudgeVerifier
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool

pytestmark = pytest.mark.unit

ROWS = [
    {"id": "mul", "prompt": "What is 17 * 23?", "answer": 391},
    {"id": "file", "prompt": "What number is in n.txt, times 2?", "answer": "84",
     "files": {"n.txt": "42\n"}},
]  # fmt: skip


def jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture
def pool():
    """A pool per test: an env a test leaves open holds its box only until then."""
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0, acquire_timeout_s=5)) as pool:
        yield pool


def play(env, actions: list[str], task_id: str):
    env.reset(options={"task_id": task_id})
    for action in actions:
        result = env.step(action)
        if result[2] or result[3]:
            return result
    return result


def test_rows_come_from_jsonl_and_parquet_alike(tmp_path: Path) -> None:
    from_jsonl = load_rows(jsonl(tmp_path / "rows.jsonl", ROWS))
    table = pa.table({"prompt": ["2 + 2?"], "answer": ["4"], "tests": [None]})
    pq.write_table(table, tmp_path / "rows.parquet")
    from_parquet = load_rows(str(tmp_path / "rows.parquet"))
    assert [r.id for r in from_jsonl] == ["mul", "file"]
    assert from_jsonl[0].answer == "391" and from_jsonl[0].files == {}
    assert from_jsonl[1].files == {"n.txt": "42\n"}
    assert (from_parquet[0].id, from_parquet[0].answer) == ("row-0", "4")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no row"),
        ('{"answer": "1"}\n', "row 0: prompt"),
        ('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "row ids repeat"),
        ("not json\n", "cannot read"),
    ],
)
def test_a_bad_data_set_names_the_file_or_the_row(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / "bad.jsonl").write_text(content)
    with pytest.raises(DatasetError, match=message):
        load_rows(str(tmp_path / "bad.jsonl"))
    with pytest.raises(DatasetError, match="does not exist"):
        load_rows(str(tmp_path / "absent.jsonl"))


def test_exact_answers_with_a_tool_in_the_box(tmp_path: Path, pool) -> None:
    register()
    env = gymnasium.make(
        "dataset/Rows-v0", data_files=jsonl(tmp_path / "r.jsonl", ROWS), sandbox_pool=pool
    )
    obs, info = env.reset(options={"task_id": "file"})
    assert obs[1]["content"].endswith("Files: n.txt")
    obs, _, terminated, _, _ = env.step("```bash\necho $(( $(cat n.txt) * 2 ))\n```")
    assert obs[0]["content"] == "exit code 0\nstdout:\n84\n" and not terminated
    _, reward, terminated, _, _ = env.step("<answer> 84 </answer>")
    assert (reward, terminated) == (1.0, True)
    assert play(env, ["<answer>392</answer>"], "mul")[1] == 0.0
    obs, reward, terminated, _truncated, info = play(
        env, ["```bash\nls\n```\n<answer>1</answer>"], "mul"
    )
    assert (reward, info["failure"]) == (-0.05, "task") and "not both" in obs[0]["content"]


def test_numeric_tolerance_and_non_numbers(tmp_path: Path, pool) -> None:
    rows = [{"id": "pi", "prompt": "pi to 3 places?", "answer": "3.14159"}]
    env_id = register_dataset(
        "test/Pi-v0", jsonl(tmp_path / "pi.jsonl", rows), {"kind": "numeric", "abs_tol": 1e-3}
    )
    env = gymnasium.make(env_id, sandbox_pool=pool)
    assert play(env, ["<answer>3.1416</answer>"], "pi")[1] == 1.0
    assert play(env, ["<answer>3.15</answer>"], "pi")[1] == 0.0
    assert play(env, ["<answer>about three</answer>"], "pi")[1] == 0.0  # wrong, not infra
    with pytest.raises(DatasetError, match="not a number"):
        gymnasium.make(
            "dataset/Rows-v0",
            data_files=jsonl(tmp_path / "x.jsonl", [{"prompt": "p", "answer": "n/a"}]),
            verifier={"kind": "numeric"},
            sandbox_pool=pool,
        )


def judge_server(replies: list[str], seen: list[dict]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        body = {
            "choices": [{"message": {"role": "assistant", "content": replies.pop(0)}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 2},
        }
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handle)


def test_the_judge_scores_by_its_rubric_once_per_answer(tmp_path: Path, pool) -> None:
    seen: list[dict] = []
    config = JudgeVerifier(base_url="http://judge.test/v1", model="judge-model")
    judge = Judge(config, transport=judge_server(["0.5", "1"], seen))
    register()
    env = gymnasium.make(
        "dataset/Rows-v0",
        data_files=jsonl(tmp_path / "r.jsonl", ROWS),
        verifier=config.model_dump(),
        judge=judge,
        sandbox_pool=pool,
    )
    assert play(env, ["<answer>about 390</answer>"], "mul")[1] == 0.5
    assert play(env, ["<answer>about 390</answer>"], "mul")[1] == 0.5  # from the cache
    assert play(env, ["<answer>391</answer>"], "mul")[1] == 1.0
    assert len(seen) == 2
    assert seen[0]["model"] == "judge-model" and seen[0]["temperature"] == 0.0
    assert seen[0]["messages"][0]["content"] == config.rubric
    assert "Reference answer:\n391" in seen[0]["messages"][1]["content"]
    stats = judge.stats
    assert (stats.calls, stats.cache_hits, stats.failures) == (2, 1, 0)
    assert (stats.prompt_tokens, stats.completion_tokens) == (100, 4) and stats.seconds > 0


@pytest.mark.parametrize(
    ("transport", "message"),
    [
        (judge_server(["I think it is right"], []), "not a score in [0, 1]"),
        (judge_server(["1.5"], []), "not a score in [0, 1]"),
        (httpx.MockTransport(lambda request: httpx.Response(503, text="busy")), "HTTP 503"),
        (httpx.MockTransport(lambda request: httpx.Response(200, json={"oops": 1})), "not a chat"),
        (
            httpx.MockTransport(lambda request: (_ for _ in ()).throw(httpx.ReadTimeout("slow"))),
            "no answer from http://judge.test/v1/chat/completions",
        ),
    ],
)
def test_a_judge_that_cannot_judge_is_an_infra_failure(tmp_path, pool, transport, message) -> None:
    config = JudgeVerifier(base_url="http://judge.test/v1", model="m")
    judge = Judge(config, transport=transport)
    register()
    env = gymnasium.make(
        "dataset/Rows-v0",
        data_files=jsonl(tmp_path / "r.jsonl", ROWS),
        verifier=config.model_dump(),
        judge=judge,
        sandbox_pool=pool,
    )
    _obs, reward, _terminated, truncated, info = play(env, ["<answer>391</answer>"], "mul")
    assert (reward, truncated, info["failure"]) == (0.0, True, "infra")
    assert message in info["error"]
    assert (judge.stats.calls, judge.stats.failures) == (1, 1)


async def test_the_judge_is_awaited_on_the_event_loop(tmp_path, pool) -> None:
    from rollgym.envs.aio import areset, astep

    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "1"}}]})

    config = JudgeVerifier(base_url="http://judge.test/v1", model="m")
    judge = Judge(config, async_transport=httpx.MockTransport(handle))
    register()
    env = gymnasium.make(
        "dataset/Rows-v0",
        data_files=jsonl(tmp_path / "r.jsonl", ROWS),
        verifier=config.model_dump(),
        judge=judge,
        sandbox_pool=pool,
    )
    await areset(env, options={"task_id": "mul"})
    _obs, reward, terminated, _truncated, _info = await astep(env, "<answer>391</answer>")
    assert (reward, terminated) == (1.0, True) and judge.stats.calls == 1
