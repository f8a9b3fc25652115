"""Check safetensors files against a manifest: headers first, then the values.

The format: 8 bytes little-endian header length ``N``, ``N`` bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then
the data. The tensors' byte ranges tile the data exactly (no overlap, no hole), and a file
is complete when its size is ``8 + N + max(end)``; a shorter one was truncated in transit.

``read_header``/``stage`` touch no tensor data; ``check_values`` then reads each tensor
once, where the file lies (memory-mapped: no copy): every value must be finite, and
(optionally) each tensor's L2 norm within a factor of the served one's. Both are
vectorised reductions with no scratch the size of a tensor: a tensor's sum is finite only
if all its values are (one NaN or infinity makes any sum NaN or infinite), so a finite
sum settles it and only a non-finite one (a bad value, or an overflow) is counted again,
``CHUNK`` values at a time. All of it is file and CPU work: callers run it off the event
loop.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rollgym.engine.base import (
    ITEM_SIZE,
    TORCH_DTYPE,
    Manifest,
    NcclWeights,
    StagedWeights,
    TensorSpec,
)
from rollgym.engine.errors import BadWeights, TruncatedWeights

MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
CHUNK = 1 << 20  # values one slow-path step reduces: its scratch stays in the cache
_SHOWN = 5  # problems named per kind in an error message


def read_header(path: Path) -> tuple[dict[str, TensorSpec], int]:
    """The tensors of one safetensors file and its data size; raises ``BadWeights``."""
    header, length, size = _raw_header(path)
    header.pop("__metadata__", None)
    tensors: dict[str, TensorSpec] = {}
    ranges = []
    for name, entry in header.items():
        spec, (begin, end) = _entry(path.name, name, entry)
        if end - begin != math.prod(spec.shape) * ITEM_SIZE[spec.dtype]:
            raise BadWeights(f"{path.name}: {name} has {end - begin} bytes for {spec}")
        tensors[name] = spec
        ranges.append((begin, end, name))
    data_end = _tiled(path.name, ranges)
    expected = 8 + length + data_end
    if size < expected:
        raise TruncatedWeights(f"{path.name}: {size} bytes, the header promises {expected}")
    if size > expected:
        raise BadWeights(f"{path.name}: {size - expected} bytes after the last tensor")
    return tensors, data_end


def read_metadata(path: Path) -> dict[str, str]:
    """The file's ``__metadata__`` (text keys and values; empty when it has none)."""
    metadata = _raw_header(path)[0].get("__metadata__") or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise BadWeights(f"{path.name}: __metadata__ must map text to text")
    return metadata


def _raw_header(path: Path) -> tuple[dict[str, Any], int, int]:
    """The header's JSON object, its length and the file's size; raises ``BadWeights``."""
    size = path.stat().st_size
    if size < 8:  # checked before opening: a /proc file (size 0) may block its reader
        raise TruncatedWeights(f"{path.name}: {size} bytes, not even a header length")
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > MAX_HEADER_BYTES:
            raise BadWeights(f"{path.name}: header length {length} is not safetensors")
        raw = f.read(length)
    if len(raw) < length:
        raise TruncatedWeights(f"{path.name}: the header is cut off ({len(raw)} of {length})")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadWeights(f"{path.name}: the header is not JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise BadWeights(f"{path.name}: the header is not a JSON object")
    return header, length, size


def _tiled(file: str, ranges: list[tuple[int, int, str]]) -> int:
    """The data's end, once the tensors' byte ranges are checked to tile it exactly."""
    position = 0
    for begin, end, name in sorted(ranges):
        if begin != position:
            kind = "overlaps the tensor before it" if begin < position else "leaves a hole"
            raise BadWeights(f"{file}: tensor {name!r} (bytes {begin}-{end}) {kind}")
        position = end
    return position


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


def check_values(
    weights: StagedWeights,
    *,
    served_norms: Mapping[str, float] | None = None,
    max_norm_ratio: float | None = None,
) -> dict[str, float]:
    """Refuse (``BadWeights``, naming the tensor) any non-finite value, and with
    ``max_norm_ratio`` any tensor whose L2 norm is more than that factor above or below its
    ``served_norms`` entry. Returns the norms by served name (empty without a ratio)."""
    norms: dict[str, float] = {}
    for name, tensor in tensors_of(weights):
        if bad := non_finite(tensor):
            raise BadWeights(f"tensor {name} holds {bad} non-finite values (NaN or infinity)")
        if max_norm_ratio is None:
            continue
        norm = l2_norm(tensor)
        before = (served_norms or {}).get(name)
        if before is not None and not _within(norm, before, max_norm_ratio):
            raise BadWeights(
                f"tensor {name}'s norm moves from {before:.4g} to {norm:.4g}, more than the "
                f"factor {max_norm_ratio:g} allowed (weights.max_norm_ratio)"
            )
        norms[name] = norm
    return norms


def tensor_norms(weights: StagedWeights) -> dict[str, float]:
    """Each tensor's L2 norm by served name (the reference of the norm check)."""
    return {name: l2_norm(tensor) for name, tensor in tensors_of(weights)}


def non_finite(tensor: Any) -> int:
    """How many values of ``tensor`` are NaN or infinite (see the module docstring).

    >>> import torch
    >>> non_finite(torch.tensor([1.0, 2.0])), non_finite(torch.tensor([1.0, float("nan")]))
    (0, 1)
    >>> non_finite(torch.tensor([3e38, 3e38]))  # the sum overflows; the values are finite
    0
    """
    import torch

    if not tensor.is_floating_point():
        return 0
    flat = tensor.reshape(-1)
    accumulator = torch.float64 if flat.dtype == torch.float64 else torch.float32
    if math.isfinite(float(flat.sum(dtype=accumulator))):
        return 0
    return sum(int((~c.to(accumulator).isfinite()).sum()) for c in flat.split(CHUNK))


def l2_norm(tensor: Any) -> float:
    """The L2 norm of ``tensor``: one float32 reduction (torch's, pairwise), or float64
    ``CHUNK`` values at a time where float32 overflows (ten times slower)."""
    import torch

    flat = tensor.reshape(-1)
    if flat.dtype != torch.float64:
        norm = float(torch.linalg.vector_norm(flat, dtype=torch.float32))
        if math.isfinite(norm):
            return norm
    squares = sum(float(c.to(torch.float64).square().sum()) for c in flat.split(CHUNK))
    return math.sqrt(squares)


def tensors_of(weights: StagedWeights) -> Iterator[tuple[str, Any]]:
    """Each tensor of ``weights`` as a torch tensor, one at a time, by its served name."""
    from safetensors import safe_open

    for path in weights.files:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118  # safe_open has no __iter__
                if name not in weights.skip:
                    yield weights.renames.get(name, name), f.get_tensor(name)


def _within(norm: float, before: float, ratio: float) -> bool:
    if before == 0.0 or norm == 0.0:
        return norm == before
    return 1 / ratio <= norm / before <= ratio


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
    """The safetensors files of a file path or a checkpoint directory (regular files only:
    a FIFO or a device would block the reader)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise BadWeights(f"{path} is neither a regular file nor a directory")
    files = sorted(f for f in path.glob("*.safetensors") if f.is_file())
    if not files:
        raise BadWeights(f"{path} holds no .safetensors file")
    return files
