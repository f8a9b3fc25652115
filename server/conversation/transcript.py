"""An episode's tokens as they entered the model's context, and the check each turn keeps.

``Transcript`` holds the first prompt and everything appended after it: sampled ids with
their logprobs (mask 1) and environment ids (logprob 0.0, mask 0). Nothing in it is ever
re-tokenized. ``check_extends`` is the guard each turn runs before sampling: the context
sent now must start with the context sent last turn plus what was sampled then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rollgym.server.errors import TokenPrefixError


def check_extends(previous: Sequence[int], current: Sequence[int]) -> None:
    """Raise ``TokenPrefixError`` unless ``current[:len(previous)] == previous``.

    >>> check_extends([1, 2], [1, 2, 3])
    >>> check_extends([1, 2], [1, 3, 3])
    Traceback (most recent call last):
    ...
    rollgym.server.errors.TokenPrefixError: the new context diverges from the last one at token 1 (2 -> 3)
    """
    if len(current) < len(previous):
        raise TokenPrefixError(
            f"the new context ({len(current)} tokens) is shorter than the last one "
            f"({len(previous)} tokens)"
        )
    for index, (old, new) in enumerate(zip(previous, current, strict=False)):
        if old != new:
            raise TokenPrefixError(
                f"the new context diverges from the last one at token {index} ({old} -> {new})"
            )


@dataclasses.dataclass
class Transcript:
    """Token-faithful record of one episode (see the module docstring)."""

    prompt_ids: list[int]
    completion_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    _last_context: list[int] = dataclasses.field(default_factory=list)

    def context(self) -> list[int]:
        """The model's next prompt, checked to extend the last one (see ``check_extends``)."""
        context = self.prompt_ids + self.completion_ids
        check_extends(self._last_context, context)
        self._last_context = context
        return context

    def add_model(self, token_ids: Sequence[int], logprobs: Sequence[float]) -> None:
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} sampled ids but {len(logprobs)} logprobs")
        self.completion_ids.extend(token_ids)
        self.logprobs.extend(logprobs)
        self.loss_mask.extend([1] * len(token_ids))

    def add_env(self, token_ids: Sequence[int]) -> None:
        self.completion_ids.extend(token_ids)
        self.logprobs.extend([0.0] * len(token_ids))
        self.loss_mask.extend([0] * len(token_ids))

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)
