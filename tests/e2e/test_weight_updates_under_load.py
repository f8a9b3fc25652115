"""Weight updates while generations run (``bench.robustness``), in both in-flight modes:
no request fails, no generation mixes two versions, every update applies."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.robustness import AGENT_KEY, updates_under_load
from rollgym.run.server_process import ServerProcess

UPDATES, CLIENTS = 6, 8


@pytest.mark.parametrize("mode", ["finish", "abort"])
def test_updates_under_load_fail_nothing_and_mix_no_versions(
    tmp_path, default_model_dir, mode
) -> None:
    settings = {
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_ENGINE__IN_FLIGHT": mode,
        "ROLLGYM_AGENTS__KEYS": json.dumps({"bench": AGENT_KEY}),
    }
    with ServerProcess(
        model_dir=default_model_dir, data_dir=tmp_path, threads=1, settings=settings
    ) as server:
        result = asyncio.run(updates_under_load(server, default_model_dir, UPDATES, CLIENTS))
    print(f"\n{mode}: {result}")
    assert result["updates"] == UPDATES and result["requests"] > UPDATES
    assert result["failed"] == 0 and result["mixed"] == 0
