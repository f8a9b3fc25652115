"""Benchmarks: each compares against a baseline in the same run and prints a table.

Run one with ``.venv/bin/python -m bench.<name>``.
"""


def quiet_training_output() -> None:
    """No progress bars, no TRL warning about vLLM versions it was not tested with: a
    benchmark's output is its table."""
    import warnings

    warnings.filterwarnings("ignore", message="TRL currently supports vLLM", category=UserWarning)
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
