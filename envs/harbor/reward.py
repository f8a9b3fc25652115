"""The verifier's reward, read on the host from the files its tests wrote.

Harbor's rules (``harbor.verifier.verifier``): ``/logs/verifier/reward.json`` wins over
``reward.txt``; ``reward.txt`` holds one number; ``reward.json`` holds a number or an
object of named numbers. rollgym trains on one number, so an object must have a
``reward`` key or exactly one key. Anything else (no file, an empty one, text that is no
number, a non-finite or non-numeric value, an object of several rewards and no
``reward``) is not a score: ``VerifierFailed``, an infrastructure failure of the episode,
never a reward of 0.

>>> reward_of({"reward.json": None, "reward.txt": b"1\\n"})
1.0
>>> reward_of({"reward.json": b'{"reward": 0.25, "tests_passed": 1}', "reward.txt": b"0"})
0.25
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from rollgym.envs.errors import InfraError

MAX_SHOWN = 80


class VerifierFailed(InfraError):
    """The task's verifier gave no usable reward (hung, wrote nothing, wrote garbage)."""


def reward_of(files: Mapping[str, bytes | None]) -> float:
    """The reward from ``{"reward.json": bytes | None, "reward.txt": bytes | None}``."""
    data = files.get("reward.json")
    if data is not None:
        return _from_json(data)
    data = files.get("reward.txt")
    if data is not None:
        return _from_text(data)
    raise VerifierFailed(
        "the verifier wrote no reward (neither /logs/verifier/reward.txt nor reward.json)"
    )


def _from_text(data: bytes) -> float:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise VerifierFailed("/logs/verifier/reward.txt is empty")
    try:
        value = float(text)
    except ValueError:
        raise VerifierFailed(f"/logs/verifier/reward.txt is not a number: {_shown(text)}") from None
    return _finite(value, "reward.txt")


def _from_json(data: bytes) -> float:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise VerifierFailed("/logs/verifier/reward.json is empty")
    try:
        value = json.loads(text)
    except ValueError:
        raise VerifierFailed(f"/logs/verifier/reward.json is not JSON: {_shown(text)}") from None
    if isinstance(value, dict):
        if "reward" in value:
            value = value["reward"]
        elif len(value) == 1:
            (value,) = value.values()
        else:
            raise VerifierFailed(
                f"/logs/verifier/reward.json names {sorted(value)[:5]} and no 'reward': "
                "which one is the reward?"
            )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise VerifierFailed(
            f"/logs/verifier/reward.json holds {_shown(repr(value))}, not a number"
        )
    return _finite(float(value), "reward.json")


def _finite(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise VerifierFailed(f"/logs/verifier/{name} holds {value}, not a finite number")
    return value


def _shown(text: str) -> str:
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "...")
