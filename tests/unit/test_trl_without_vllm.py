"""The trainer process imports TRL's GRPO trainer without vLLM (trainer.trl_without_vllm).

Each check runs in a fresh interpreter: what a process has imported is the thing tested.
"""

from __future__ import annotations

import subprocess
import sys


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout.strip()


def test_trls_grpo_module_imports_vllm_when_it_is_installed():
    """Why the module exists: if TRL stops importing vLLM here, remove it."""
    code = "import sys, trl.trainer.grpo_trainer; print('vllm' in sys.modules)"
    assert _python(code) == "True"


def test_the_trainer_imports_without_vllm_and_trls_check_is_restored():
    code = (
        "import sys\n"
        "from rollgym.trainer.trl_without_vllm import import_trl_without_vllm\n"
        "did = import_trl_without_vllm()\n"
        "from rollgym.trainer.grpo import ServerGRPOTrainer\n"
        "import trl.import_utils as u\n"
        "print(did, 'vllm' in sys.modules, u.is_vllm_available(), import_trl_without_vllm())"
    )
    # done; vLLM never loaded; TRL's own check answers truly again; a second call is a no-op
    assert _python(code) == "True False True False"


def test_a_process_that_loaded_trls_vllm_generation_is_left_as_it_is():
    code = (
        "import trl.generation.vllm_generation as g\n"
        "from rollgym.trainer.trl_without_vllm import import_trl_without_vllm\n"
        "print(import_trl_without_vllm(), hasattr(g, 'LLM'))"
    )
    assert _python(code) == "False True"
