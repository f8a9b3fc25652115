"""What one shell or Python call produced, as the executor reports it to the host."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class CallResult:
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    duration_s: float
    timed_out: bool = False
    oom: bool = False

    def to_message(self) -> dict[str, Any]:
        return {"ok": True, **vars(self)}  # flat fields: no need for asdict's deep copy
