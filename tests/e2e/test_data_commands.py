"""``rollgym generate`` and ``rollgym export`` as a user runs them: against a real
``rollgym serve`` (its rollout runner, then its archive over HTTP) and in-process on the
default model; every output loads back with ``datasets``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgym.contract.chat import read_jsonl
from rollgym.run.server_process import ENGINE_ENV, ServerProcess

GUESS = ["--env", "rollgym/GuessNumber-v0", "--env-kwargs", '{"low": 1, "high": 8}']
SAMPLING = ["--max-turns", "2", "--max-tokens", "8", "--temperature", "1.0"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("data-server")
    settings = {"ROLLGYM_ENGINE__MAX_MODEL_LEN": "512"}
    with ServerProcess(model_dir=default_model_dir, data_dir=data, settings=settings) as server:
        yield server


def rollgym(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENGINE_ENV, **({"ROLLGYM_ADMIN_TOKEN": token} if token else {})}
    done = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def load(out: Path):  # type: ignore[no-untyped-def]
    from datasets import load_dataset, load_from_disk

    dataset = load_from_disk(str(out / "dataset"))
    parquet = load_dataset("parquet", data_files=str(out / "data.parquet"))["train"]
    assert dataset["id"] == parquet["id"]
    return dataset


def test_generate_with_a_server_then_export_its_archive(server, tmp_path) -> None:
    generated = tmp_path / "generated"
    said = rollgym(
        "generate", *GUESS, *SAMPLING, "--episodes", "8", "--group-size", "2",
        "--start-seed", "100", "--server", server.url, "--no-near-dedup",
        "--out", str(generated), token=server.admin_token,
    ).stdout  # fmt: skip
    assert "rows written" in said
    rows = load(generated)
    assert 1 <= rows.num_rows <= 8  # the server keeps the valid episodes of a group
    assert set(rows["task_seed"]) <= {100, 101, 102, 103}
    assert set(rows["outcome"]) == {"generated"}
    assert all(row[0]["role"] == "system" for row in rows["messages"])
    manifest = json.loads((generated / "manifest.json").read_text())
    assert manifest["rows"] == rows.num_rows

    exported = tmp_path / "exported"
    done = rollgym("export", "--server", server.url, "--out", str(exported), "--no-near-dedup",
                   token=server.admin_token)  # fmt: skip
    archive = load(exported)
    read = re.findall(r"read (\d+)/(\d+) archived groups", done.stderr)  # the closing count
    assert read and read[-1][0] == read[-1][1] and int(read[-1][0]) >= 1, done.stderr
    assert set(rows["id"]) <= set(archive["id"])  # generate acked them: now archived
    assert set(archive["outcome"]) == {"trained"}
    assert len(read_jsonl(exported / "chat.jsonl")) == archive.num_rows


def test_generate_in_process_on_the_default_model(default_model_dir, tmp_path) -> None:
    out = tmp_path / "local"
    rollgym(
        "generate", *GUESS, *SAMPLING, "--episodes", "6", "--group-size", "3",
        "--model-dir", str(default_model_dir), "--include-invalid", "--no-near-dedup",
        "--no-exact-dedup", "--out", str(out), "--format", "dataset,jsonl",
    )  # fmt: skip
    rows = load_from_disk_only(out)
    assert rows.num_rows == 6 and sorted(set(rows["task_seed"])) == [0, 1]
    assert not (out / "data.parquet").exists()
    for row in rows:
        assert len(row["logprobs"]) == len(row["loss_mask"]) == len(row["completion_ids"])
        assert sum(row["loss_mask"]) > 0 and row["policy_version"] == 0
    assert len(read_jsonl(out / "chat.jsonl")) == 6


def load_from_disk_only(out: Path):  # type: ignore[no-untyped-def]
    from datasets import load_from_disk

    return load_from_disk(str(out / "dataset"))
