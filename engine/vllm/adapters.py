"""``AdapterSlots``: which LoRA adapter serves which version, and which may be unloaded.

An engine with ``engine.lora`` serves its base model plus one adapter per policy version.
Each update loads a new adapter under a name of its own (vLLM keys the prefix cache on
it, so no version reuses another's KV), then makes it the one new requests get. A request
keeps the adapter it started with until it ends, so its version is the one it started
on (vLLM's engine-wide version stamp does not apply). An older adapter is unloaded once no
request uses it.

Each adapter is loaded from a copy the slots own (hard links where the file system allows),
kept until it is unloaded: vLLM may evict an adapter from its cache while requests still
use it and read it again from its path later, and the server's store removes a replaced
version's files as soon as the next one is committed.

    >>> import tempfile
    >>> source = Path(tempfile.mkdtemp()); (source / "adapter_config.json").write_text("{}")
    2
    >>> slots = AdapterSlots(Path(tempfile.mkdtemp()))
    >>> slots.serving
    (0, None)
    >>> first = slots.new_request(source)
    >>> slots.serve(first, version=1)
    >>> with slots.use() as (version, request):
    ...     second = slots.new_request(source)
    ...     slots.serve(second, version=2)
    ...     (version, request.lora_name, slots.idle_old())
    (1, 'rollgym-1', [])
    >>> slots.idle_old(), Path(first.lora_path, "adapter_config.json").exists()
    ([1], True)
    >>> slots.unloaded(1); Path(first.lora_path).exists()
    False
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.lora.request import LoRARequest


class AdapterSlots:
    """See the module docstring."""

    def __init__(self, root: Path) -> None:
        """``root``: a folder of the slots' own, for the adapters' copies."""
        self._root = root
        self._serving: tuple[int, LoRARequest | None] = (0, None)
        self._loaded: dict[int, LoRARequest] = {}
        self._users: collections.Counter[int] = collections.Counter()
        self._next_id = 1

    @property
    def serving(self) -> tuple[int, LoRARequest | None]:
        """The version new requests get and its adapter (None: the base model alone)."""
        return self._serving

    @property
    def in_use(self) -> int:
        """Requests holding an adapter (or the base model) now."""
        return sum(self._users.values())

    def new_request(self, directory: Path) -> LoRARequest:
        """A request for (a copy of) the adapter in ``directory``, under a name and id never
        used."""
        from vllm.lora.request import LoRARequest

        key = self._next_id
        self._next_id += 1
        copy = self._root / str(key)
        copy.mkdir(parents=True)
        for source in directory.iterdir():
            try:
                os.link(source, copy / source.name)
            except OSError:  # another file system, or links not allowed
                shutil.copyfile(source, copy / source.name)
        return LoRARequest(f"rollgym-{key}", key, str(copy))

    def serve(self, request: LoRARequest, *, version: int) -> None:
        """Make ``request`` (loaded) the adapter new requests get, as ``version``."""
        self._loaded[request.lora_int_id] = request
        self._serving = (version, request)

    @contextlib.contextmanager
    def use(self) -> Iterator[tuple[int, LoRARequest | None]]:
        """The serving version and adapter, counted as in use until the block ends."""
        version, request = self._serving
        key = request.lora_int_id if request is not None else 0
        self._users[key] += 1
        try:
            yield version, request
        finally:
            self._users[key] -= 1

    def idle_old(self) -> list[int]:
        """Ids of loaded adapters that no longer serve and no request uses: to unload."""
        current = self._serving[1]
        return [
            key
            for key in self._loaded
            if (current is None or key != current.lora_int_id) and self._users[key] <= 0
        ]

    def unloaded(self, key: int) -> None:
        """Forget an adapter the engine has unloaded (or never loaded), and its copy."""
        self._loaded.pop(key, None)
        self._users.pop(key, None)
        shutil.rmtree(self._root / str(key), ignore_errors=True)

    def close(self) -> None:
        """Remove every copy (the engine is gone)."""
        shutil.rmtree(self._root, ignore_errors=True)
