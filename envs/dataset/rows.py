"""Rows of a local data set, read with Hugging Face ``datasets`` and checked once.

A row is a task: ``prompt`` (what the agent is asked), ``answer`` (what a right final
answer is, for the exact, numeric and judge verifiers) or ``tests`` (a shell script the
verifier runs in the box, for the tests verifier), optional ``files`` (``{path: text}``
put in the agent's working directory first) and optional ``id``. Other columns are
ignored. JSON lines and Parquet files are read from disk only (``datasets``' ``json`` and
``parquet`` builders), never from a hub::

    {"id": "add-1", "prompt": "What is 17 * 23?", "answer": "391"}
    {"prompt": "Fix sum.py so the tests pass.", "files": {"sum.py": "..."}, "tests": "python3 -c ..."}

Anything unreadable is a ``DatasetError`` that names the file or the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rollgym.envs.errors import EnvLoadError

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DatasetError(EnvLoadError):
    """A data set that cannot be served: a missing or unreadable file, a bad row."""


class DatasetRow(BaseModel):
    """One task of a data set (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    prompt: str = Field(min_length=1)
    answer: str | None = None
    tests: str | None = None
    files: dict[str, str] = Field(default_factory=dict)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_as_text(cls, value: Any) -> Any:
        """A number in the data (``391``) is the answer ``"391"``."""
        return (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        )

    @field_validator("files", mode="before")
    @classmethod
    def _files_as_a_mapping(cls, value: Any) -> Any:
        """``datasets`` gives a JSON object as a struct with every row's keys (absent ones
        None) and a Parquet map as ``[(key, value), ...]``: both become ``{path: text}``."""
        if value is None:
            return {}
        if isinstance(value, list):
            value = dict(value)
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v is not None}
        return value


def load_rows(data_files: str | Sequence[str]) -> tuple[DatasetRow, ...]:
    """Every row of the local JSONL or Parquet ``data_files``, in order."""
    files = [data_files] if isinstance(data_files, str) else list(data_files)
    if not files:
        raise DatasetError("data_files names no file")
    kinds = {FORMATS.get(Path(f).suffix.lower()) for f in files}
    if None in kinds or len(kinds) != 1:
        raise DatasetError(f"data_files {files}: use .jsonl, .json or .parquet files of one kind")
    for file in files:
        if not Path(file).is_file():
            raise DatasetError(f"data file {file} does not exist")
        if Path(file).stat().st_size == 0:
            raise DatasetError(f"data file {file} is empty: it holds no row")
    import datasets  # heavy: only when a data set is read

    try:
        table = datasets.load_dataset(kinds.pop(), data_files=files, split="train")
    except Exception as exc:  # datasets' own errors, arrow's, JSON's: all the file's fault
        raise DatasetError(f"cannot read {files}: {type(exc).__name__}: {exc}") from exc
    rows = []
    for number, record in enumerate(table):
        try:
            rows.append(DatasetRow.model_validate({"id": f"row-{number}", **_present(record)}))
        except ValidationError as exc:
            raise DatasetError(f"{files[0]}: row {number}: {_first_error(exc)}") from None
    if not rows:
        raise DatasetError(f"{files} hold no row")
    ids = [row.id for row in rows]
    if len(set(ids)) != len(ids):
        raise DatasetError(
            f"{files}: row ids repeat ({sorted({i for i in ids if ids.count(i) > 1})[:3]})"
        )
    return tuple(rows)


def _present(record: dict[str, Any]) -> dict[str, Any]:
    """The record without columns this row left empty (``id: None`` keeps the default)."""
    return {key: value for key, value in record.items() if value is not None}


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}"
