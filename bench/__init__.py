"""Benchmarks: each compares against a baseline in the same run and prints a table.

Run one with ``.venv/bin/python -m bench.<name>``.
"""


def as_a_rollgym_trainer() -> None:
    """This process as ``rollgym run``'s and ``rollgym train``'s: restarted once on tcmalloc
    (``rollgym.run.tcmalloc``), TRL imported without vLLM (``trainer.trl_without_vllm``).
    Call it first thing in a benchmark's own process that trains as rollgym does."""
    from rollgym.run.tcmalloc import restart_on_tcmalloc
    from rollgym.trainer.trl_without_vllm import import_trl_without_vllm

    restart_on_tcmalloc()
    import_trl_without_vllm()


def quiet_training_output() -> None:
    """No progress bars, no TRL warning about vLLM versions it was not tested with: a
    benchmark's output is its table."""
    import warnings

    warnings.filterwarnings("ignore", message="TRL currently supports vLLM", category=UserWarning)
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
