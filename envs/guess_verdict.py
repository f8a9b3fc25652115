"""The ``guess`` tool of GuessTool: a program run *inside the box*, one process per guess.

Usage in the box, as the agent's user::

    python3 -I -S -c "<this file's source>" LOW HIGH TARGET GUESS

``LOW..HIGH`` is the range still open before this guess. It prints one line of JSON: what
the agent is told, and the range left open after the guess (GuessNumber's ``"range"``
feedback, word for word)::

    {"reply": "Higher. From 5 to 8.", "low": 5, "high": 8}

The host passes the target (it keeps the truth), reads the reply as data, and judges the
reward itself from the guess and the target. Standard library only: the box has no
rollgym.

>>> verdict(1, 8, 6, 4)
{'reply': 'Higher. From 5 to 8.', 'low': 5, 'high': 8}
"""

from __future__ import annotations

import json
import sys
from typing import Any


def verdict(low: int, high: int, target: int, guess: int) -> dict[str, Any]:
    """The reply to ``guess`` and the range it leaves open (``low..high`` before it)."""
    if guess == target:
        return {"reply": "Correct!", "low": guess, "high": guess}
    if guess < target:
        low, word = max(low, guess + 1), "Higher."
    else:
        high, word = min(high, guess - 1), "Lower."
    return {"reply": f"{word} From {low} to {high}.", "low": low, "high": high}


if __name__ == "__main__":
    print(json.dumps(verdict(*(int(arg) for arg in sys.argv[1:5]))))
