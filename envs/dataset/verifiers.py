"""How a data set's answers are judged: one verifier per data set, chosen in its config.

============  =====================================================================
``exact``     the final answer equals the row's ``answer`` (space trimmed; case
              folded unless ``case_sensitive``)
``numeric``   both are numbers within ``abs_tol`` or ``rel_tol`` of each other; an
              answer that is no number is wrong (the agent's doing)
``tests``     the row's ``tests`` (a shell script) run as the box's verifier once the
              agent is gone (``Sandbox.grade``), the answer in ``$ANSWER_FILE``; exit 0
              is 1.0, anything else 0.0; past ``timeout_s`` an infrastructure failure
``judge``     a model served over the OpenAI API scores the answer by ``rubric``
              (``envs.dataset.judge``): cached, timed, counted; its failures are
              infrastructure failures, never a 0
============  =====================================================================

>>> exact_score(" Paris ", "paris", ExactVerifier())
1.0
>>> numeric_score("3.1416", "3.14159", NumericVerifier(abs_tol=1e-3))
1.0
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_RUBRIC = (
    "You grade a student's final answer to a task against the reference answer. "
    "Reply with one number from 0 to 1: 1 when the answer is right, 0 when it is wrong, "
    "a fraction for a partly right answer. Reply with the number only."
)


class _Verifier(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExactVerifier(_Verifier):
    kind: Literal["exact"] = "exact"
    case_sensitive: bool = False


class NumericVerifier(_Verifier):
    kind: Literal["numeric"] = "numeric"
    abs_tol: float = Field(1e-6, ge=0)
    rel_tol: float = Field(1e-6, ge=0)


class TestsVerifier(_Verifier):
    kind: Literal["tests"] = "tests"
    timeout_s: float = Field(30.0, gt=0, le=3600)


class JudgeVerifier(_Verifier):
    kind: Literal["judge"] = "judge"
    base_url: str = Field(description="the OpenAI API's root, e.g. http://127.0.0.1:8000/v1")
    model: str
    rubric: str = DEFAULT_RUBRIC
    api_key_env: str | None = Field(None, description="the environment variable of the key")
    timeout_s: float = Field(30.0, gt=0, le=600)
    max_tokens: int = Field(16, ge=1, le=4096)
    cache_size: int = Field(10_000, ge=0)


VerifierConfig = Annotated[
    ExactVerifier | NumericVerifier | TestsVerifier | JudgeVerifier, Field(discriminator="kind")
]


def exact_score(given: str, expected: str, verifier: ExactVerifier) -> float:
    a, b = " ".join(given.split()), " ".join(expected.split())
    if not verifier.case_sensitive:
        a, b = a.casefold(), b.casefold()
    return 1.0 if a == b else 0.0


def numeric_score(given: str, expected: str, verifier: NumericVerifier) -> float:
    """1.0 within tolerance; an answer that is no finite number scores 0.0."""
    want = float(expected)  # checked when the data set was read
    try:
        got = float(given.strip().replace(",", ""))
    except ValueError:
        return 0.0
    if not math.isfinite(got):
        return 0.0
    close = math.isclose(got, want, rel_tol=verifier.rel_tol, abs_tol=verifier.abs_tol)
    return 1.0 if close else 0.0
