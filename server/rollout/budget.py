"""The context budget: will an episode's turns fit the model's context?

Each turn adds at most ``max_tokens`` sampled tokens and then the env's reply (about
``env_tokens``), on top of the opening prompt, so a whole episode of ``max_turns`` turns
needs about::

    needed = prompt + max_turns x (max_tokens + env_tokens)      <= max_model_len

* ``fits``: it does; no episode is cut by the context;
* ``may_overflow``: long episodes may be cut (marked ``truncated_by_context``, counted): a
  warning at the start of the job or session, since turns often end before
  ``max_tokens``;
* ``cannot_fit``: not even the first turn's tokens fit after the prompt
  (``prompt + max_tokens > max_model_len``): every episode would be cut at once, so a
  rollout job is refused.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Verdict = Literal["fits", "may_overflow", "cannot_fit"]


@dataclasses.dataclass(frozen=True)
class ContextBudget:
    """See the module docstring.

    >>> short = ContextBudget(prompt=40, max_turns=3, max_tokens=8, env_tokens=12, max_model_len=128)
    >>> long = ContextBudget(prompt=40, max_turns=6, max_tokens=16, env_tokens=12, max_model_len=128)
    >>> short.verdict, long.verdict, long.needed, long.turns_that_fit
    ('fits', 'may_overflow', 208, 3)
    >>> ContextBudget(prompt=120, max_turns=1, max_tokens=16, env_tokens=0, max_model_len=128).verdict
    'cannot_fit'
    """

    prompt: int
    max_turns: int
    max_tokens: int
    env_tokens: int
    max_model_len: int

    @property
    def needed(self) -> int:
        return self.prompt + self.max_turns * (self.max_tokens + self.env_tokens)

    @property
    def turns_that_fit(self) -> int:
        """Whole turns (sampled tokens and reply) that fit after the prompt."""
        return max(self.max_model_len - self.prompt, 0) // (self.max_tokens + self.env_tokens)

    @property
    def verdict(self) -> Verdict:
        if self.prompt + self.max_tokens > self.max_model_len:
            return "cannot_fit"
        return "fits" if self.needed <= self.max_model_len else "may_overflow"

    def explain(self) -> str:
        """What the numbers are, and how to make them fit."""
        return (
            f"the opening prompt ({self.prompt} tokens) plus {self.max_turns} turns of up to "
            f"{self.max_tokens} sampled and about {self.env_tokens} env tokens need "
            f"{self.needed} tokens; the context holds {self.max_model_len} "
            f"({self.turns_that_fit} such turns): lower max_tokens or max_turns, or raise "
            "engine.max_model_len"
        )
