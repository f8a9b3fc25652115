"""``ServerProcess(cores=...)`` on the real server: the server, the vLLM engine process it
starts and every thread of both run only on the cores given (``rollgym.run.cores``), and
it serves. ``CpuSplit(pinned=True)`` hands a run's server these cores."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil

from rollgym.run.cores import allowed_cores
from rollgym.run.server_process import ServerProcess


def _thread_cores(pid: int) -> dict[int, str]:
    """Each thread of ``pid``: its allowed cores, as the kernel lists them."""
    shown = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                shown[int(task.name)] = line.split()[1]
    return shown


def test_a_pinned_server_and_its_engine_run_only_on_their_cores(default_model_dir, tmp_path):
    core = max(allowed_cores())
    settings = {"ROLLGYM_ENGINE__MAX_MODEL_LEN": "512", "ROLLGYM_SANDBOXES__POOL_SIZE": "0"}
    with ServerProcess(
        model_dir=default_model_dir, data_dir=tmp_path, settings=settings, threads=1, cores={core}
    ) as server:
        assert server.pid is not None
        tree = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        assert any("EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline()) for p in tree)
        for process in tree:
            threads = _thread_cores(process.pid)
            assert len(threads) >= 1
            assert set(threads.values()) == {str(core)}, (process.name(), threads)
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
