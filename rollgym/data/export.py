"""Write rows out: a Hugging Face dataset, Parquet, and OpenAI chat JSONL.

``write_export(rows, out_dir, formats)`` lays out::

    out_dir/
      dataset/         datasets.Dataset.save_to_disk (load_from_disk reads it back)
      data.parquet     the same rows as one Parquet file (load_dataset("parquet", ...))
      chat.jsonl       OpenAI chat fine-tuning format: {"messages": [...], "tools": [...]}
      manifest.json    counts: rows, and what curation removed (CurationReport)

Every format holds the same rows in the same order; the JSONL holds the conversation only
(the OpenAI format has no room for token ids), so rows without recorded messages (data
from before the server recorded them) are left out of it and counted.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from rollgym.contract.chat import ChatRecord, ChatTurn, write_jsonl
from rollgym.data.curate import CurationReport
from rollgym.data.rows import DataRow, columns, features

Format = Literal["dataset", "parquet", "jsonl"]
FORMATS: tuple[Format, ...] = ("dataset", "parquet", "jsonl")


@dataclasses.dataclass(frozen=True)
class ExportResult:
    out_dir: Path
    rows: int
    chat_records: int
    seconds: float
    files: list[Path]


def chat_of(row: DataRow) -> ChatRecord | None:
    """The row's conversation as an OpenAI record; None when it has none."""
    if not row.messages:
        return None
    tools = json.loads(row.tools) if row.tools else None
    return ChatRecord(messages=[ChatTurn.model_validate(m) for m in row.messages], tools=tools)


def write_export(
    rows: Sequence[DataRow],
    out_dir: Path,
    formats: Sequence[Format] = FORMATS,
    *,
    report: CurationReport | None = None,
) -> ExportResult:
    """Write ``rows`` in ``formats`` under ``out_dir`` (see the module docstring)."""
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    if "dataset" in formats or "parquet" in formats:
        import pyarrow as pa

        schema = features()  # the Arrow table directly: datasets' from_dict is much slower
        dataset = Dataset(pa.Table.from_pydict(columns(rows), schema=schema.arrow_schema))
        if "dataset" in formats:
            target = out_dir / "dataset"
            shutil.rmtree(target, ignore_errors=True)
            # one shard at least: datasets writes none for an empty set and cannot load that
            dataset.save_to_disk(str(target), num_shards=1 if not rows else None)
            files.append(target)
        if "parquet" in formats:
            dataset.to_parquet(str(out_dir / "data.parquet"))
            files.append(out_dir / "data.parquet")
    chats = 0
    if "jsonl" in formats:
        records = (record for row in rows if (record := chat_of(row)) is not None)
        chats = write_jsonl(records, out_dir / "chat.jsonl")
        files.append(out_dir / "chat.jsonl")
    manifest = {
        "rows": len(rows),
        "chat_records": chats,
        "formats": list(formats),
        "curation": dataclasses.asdict(report) if report else None,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    files.append(out_dir / "manifest.json")
    return ExportResult(out_dir, len(rows), chats, time.perf_counter() - started, files)
