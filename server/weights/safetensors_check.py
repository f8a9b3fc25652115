"""Read safetensors headers and check files against a manifest, touching no tensor data.

The format: 8 bytes little-endian header length ``N``, ``N`` bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then
the data. A file is complete when its size is ``8 + N + max(end)``; a shorter one was
truncated in transit.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path

from rollgym.server.errors import BadWeights, TruncatedWeights
from rollgym.server.weights.base import Manifest, NcclWeights, StagedWeights, TensorSpec

ITEM_SIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
TORCH_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
MAX_HEADER_BYTES = 100 << 20
_SHOWN = 5  # problems named per kind in an error message


def read_header(path: Path) -> tuple[dict[str, TensorSpec], int]:
    """The tensors of one safetensors file and its data size; raises ``BadWeights``."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise TruncatedWeights(f"{path.name}: {size} bytes, not even a header length")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise BadWeights(f"{path.name}: header length {length} is not safetensors")
        raw = f.read(length)
    if len(raw) < length:
        raise TruncatedWeights(f"{path.name}: the header is cut off ({len(raw)} of {length})")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadWeights(f"{path.name}: the header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise BadWeights(f"{path.name}: the header is not a JSON object")
    header.pop("__metadata__", None)
    tensors: dict[str, TensorSpec] = {}
    data_end = 0
    for name, entry in header.items():
        spec, (begin, end) = _entry(path.name, name, entry)
        if end - begin != math.prod(spec.shape) * ITEM_SIZE[spec.dtype]:
            raise BadWeights(f"{path.name}: {name} has {end - begin} bytes for {spec}")
        tensors[name] = spec
        data_end = max(data_end, end)
    expected = 8 + length + data_end
    if size < expected:
        raise TruncatedWeights(f"{path.name}: {size} bytes, the header promises {expected}")
    if size > expected:
        raise BadWeights(f"{path.name}: {size - expected} bytes after the last tensor")
    return tensors, data_end


def _entry(file: str, name: str, entry: object) -> tuple[TensorSpec, tuple[int, int]]:
    malformed = BadWeights(f"{file}: tensor {name!r} has a malformed header entry")
    if not isinstance(entry, dict):
        raise malformed
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEM_SIZE or not isinstance(shape, list) or not isinstance(offsets, list):
        raise malformed
    if not all(isinstance(d, int) and d >= 0 for d in shape) or len(offsets) != 2:
        raise malformed
    begin, end = offsets
    if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
        raise malformed
    return TensorSpec(str(dtype), tuple(shape)), (begin, end)


def read_manifest(files: Iterable[Path], *, dtype: str | None = None) -> dict[str, TensorSpec]:
    """The tensors of a checkpoint; floating ones re-typed to ``dtype`` (the served one)."""
    manifest: dict[str, TensorSpec] = {}
    for path in files:
        tensors, _ = read_header(path)
        manifest.update(tensors)
    if dtype is None:
        return manifest
    return {
        name: TensorSpec(dtype, spec.shape) if _floating(spec.dtype) else spec
        for name, spec in manifest.items()
    }


def stage(
    files: list[Path], manifest: Manifest, *, aliases: dict[str, str] | None = None
) -> StagedWeights:
    """Check ``files`` against ``manifest``: every name once, right shape and dtype.

    A floating tensor may come in any floating dtype (a bfloat16 trainer updating a float32
    server, or the reverse): the engine's loader casts it to the served dtype.

    ``aliases`` maps an accepted alternative name to the manifest name it stands for (a
    tied ``lm_head.weight`` for the input embedding). Raises ``BadWeights`` naming what is
    wrong: unknown names, missing names, shape or dtype mismatches.
    """
    aliases = aliases or {}
    seen: dict[str, TensorSpec] = {}
    for path in files:
        tensors, _ = read_header(path)
        duplicated = seen.keys() & tensors.keys()
        if duplicated:
            raise BadWeights(f"tensors given twice: {_names(duplicated)}")
        seen.update(tensors)
    renames = {a: t for a, t in aliases.items() if a in seen and t not in seen}
    skip = frozenset(a for a, t in aliases.items() if a in seen and t in seen)
    given = {renames.get(n, n): s for n, s in seen.items() if n not in skip}
    _compare(given, manifest)
    nbytes = sum(p.stat().st_size for p in files)
    return StagedWeights(files=tuple(files), nbytes=nbytes, renames=renames, skip=skip)


def check_announced(weights: NcclWeights, manifest: Manifest, aliases: dict[str, str]) -> None:
    """Check what a trainer announces it will broadcast, as ``stage`` checks files."""
    if len(set(weights.names)) != len(weights.names):
        raise BadWeights("a tensor name is announced twice")
    codes = [TORCH_DTYPE.get(d) for d in weights.dtype_names]
    if None in codes:
        raise BadWeights(f"dtypes must be among {sorted(TORCH_DTYPE)}")
    given = {
        aliases.get(n, n): TensorSpec(str(c), tuple(s))
        for n, c, s in zip(weights.names, codes, weights.shapes, strict=True)
    }
    _compare(given, manifest)


def _compare(given: Manifest, manifest: Manifest) -> None:
    problems = []
    if unknown := given.keys() - manifest.keys():
        problems.append(f"unknown tensors {_names(unknown)}")
    if missing := manifest.keys() - given.keys():
        problems.append(f"missing tensors {_names(missing)}")
    wrong = [
        f"{n}: {given[n].dtype}{list(given[n].shape)}, expected {s.dtype}{list(s.shape)}"
        for n, s in sorted(manifest.items())
        if n in given and not _fits(given[n], s)
    ]
    if wrong:
        problems.append(
            f"{len(wrong)} tensors of the wrong dtype or shape: " + "; ".join(wrong[:_SHOWN])
        )
    if problems:
        raise BadWeights("the weights do not fit the served model: " + "; ".join(problems))


def _fits(given: TensorSpec, expected: TensorSpec) -> bool:
    if given.shape != expected.shape:
        return False
    return given.dtype == expected.dtype or (_floating(given.dtype) and _floating(expected.dtype))


def _floating(dtype: str) -> bool:
    return dtype.startswith(("F", "BF"))


def _names(names: Iterable[str]) -> str:
    ordered = sorted(names)
    more = f" and {len(ordered) - _SHOWN} more" if len(ordered) > _SHOWN else ""
    return ", ".join(ordered[:_SHOWN]) + more


def checkpoint_files(path: Path) -> list[Path]:
    """The safetensors files of a file path or a checkpoint directory."""
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise BadWeights(f"{path} holds no .safetensors file")
    return files
