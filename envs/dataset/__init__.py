"""Tasks from a data set: rows of local JSONL or Parquet files, one verifier per data set.

- ``rows``: the rows, read with ``datasets`` from disk and checked once (``DatasetError``);
- ``verifiers``: exact match, numeric tolerance, the row's tests in the box, an LLM judge;
- ``judge``: the judge over the OpenAI API, cached, timed and counted (``JudgeFailed``);
- ``env``: ``DatasetEnv``, a shell in a box and one verified ``<answer>``.

The operator registers a data set as an env id, its files and verifier fixed in the
registration (an agent names the id; it never passes files)::

    from rollgym.envs.dataset import register_dataset
    register_dataset("mine/Arithmetic-v0", "data/arith.jsonl", {"kind": "numeric"})

``dataset/Rows-v0`` (the ``rollgym.envs`` entry point) takes ``data_files=`` and
``verifier=`` for operators who pass them per job. docs/environments.md has examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium

from rollgym.envs.dataset.rows import DatasetError, DatasetRow, load_rows

ENV_ID = "dataset/Rows-v0"
ENTRY_POINT = "rollgym.envs.dataset.env:DatasetEnv"
MAX_EPISODE_STEPS = 8


def register() -> None:
    """Register ``dataset/Rows-v0`` (idempotent)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point=ENTRY_POINT, max_episode_steps=MAX_EPISODE_STEPS)


def register_dataset(
    env_id: str,
    data_files: str | Sequence[str],
    verifier: dict[str, Any] | None = None,
    *,
    max_episode_steps: int = MAX_EPISODE_STEPS,
    **kwargs: Any,
) -> str:
    """Register ``env_id`` as the data set ``data_files`` judged by ``verifier``.

    The rows are read now, so a bad file fails here (``DatasetError``), not in an episode.
    """
    load_rows(data_files)
    files = [data_files] if isinstance(data_files, str) else list(data_files)
    gymnasium.register(
        env_id,
        entry_point=ENTRY_POINT,
        max_episode_steps=max_episode_steps,
        kwargs={"data_files": files, "verifier": verifier or {"kind": "exact"}, **kwargs},
    )
    return env_id


__all__ = ["ENV_ID", "DatasetError", "DatasetRow", "load_rows", "register", "register_dataset"]
