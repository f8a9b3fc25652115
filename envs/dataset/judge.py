"""An LLM judge over the OpenAI API: cached, timed and counted; its failures are not scores.

``Judge.score(question, answer, reference)`` sends one chat completion to
``{base_url}/chat/completions`` (``temperature`` 0): the rubric as the system message,
the task, the reference answer and the candidate answer as the user message, and reads
a number from 0 to 1 from the reply. The same question, answer and reference are asked
once (an LRU cache of ``cache_size``). Everything that is not a score is ``JudgeFailed``,
an ``InfraError``: the server did not answer in ``timeout_s``, answered an HTTP error or
something that is not a chat completion, or the model replied with anything but one
number in [0, 1]. The episode it judged is then an infrastructure failure, excluded from
training and counted, because a judge that cannot judge says nothing about the agent.

``stats`` counts calls, cache hits, failures, seconds and tokens (the ``usage`` the
server reports): what the judge costs beside the policy. ``ascore`` is the same on an
event loop, never blocking it.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from typing import Any

import httpx

from rollgym.envs.dataset.verifiers import JudgeVerifier
from rollgym.envs.errors import InfraError

SCORE = re.compile(r"^\s*(?:score\s*[:=]\s*)?([01](?:\.\d+)?|\.\d+)\s*\.?\s*$", re.IGNORECASE)
MAX_SHOWN = 80


class JudgeFailed(InfraError):
    """The judge gave no score: unreachable, an HTTP error, or a reply that is no score."""


@dataclasses.dataclass
class JudgeStats:
    """What the judge cost so far."""

    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Judge:
    """Scores answers by a rubric through an OpenAI-compatible server (module docstring).

    ``transport``/``async_transport``: httpx transports (tests pass a ``MockTransport``).
    """

    def __init__(
        self,
        config: JudgeVerifier,
        *,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.stats = JudgeStats()
        self._transport = transport
        self._async_transport = async_transport
        self._cache: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._lock = threading.Lock()

    def score(self, question: str, answer: str, reference: str | None) -> float:
        key, body = self._request(question, answer, reference)
        cached = self._cached(key)
        if cached is not None:
            return cached
        start = time.perf_counter()
        try:
            with httpx.Client(transport=self._transport, timeout=self.config.timeout_s) as client:
                reply = client.post(self._url(), json=body, headers=self._headers())
        except httpx.HTTPError as exc:
            raise self._failed(start, f"no answer from {self._url()}: {exc!r}") from exc
        return self._scored(key, reply, start)

    async def ascore(self, question: str, answer: str, reference: str | None) -> float:
        key, body = self._request(question, answer, reference)
        cached = self._cached(key)
        if cached is not None:
            return cached
        start = time.perf_counter()
        try:
            async with httpx.AsyncClient(
                transport=self._async_transport, timeout=self.config.timeout_s
            ) as client:
                reply = await client.post(self._url(), json=body, headers=self._headers())
        except httpx.HTTPError as exc:
            raise self._failed(start, f"no answer from {self._url()}: {exc!r}") from exc
        return self._scored(key, reply, start)

    # -- the request and the reply ------------------------------------------------------------
    def _request(
        self, question: str, answer: str, reference: str | None
    ) -> tuple[str, dict[str, Any]]:
        lines = [f"Task:\n{question}"]
        if reference is not None:
            lines.append(f"Reference answer:\n{reference}")
        lines.append(f"Student's answer:\n{answer}")
        body = {
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": self.config.rubric},
                {"role": "user", "content": "\n\n".join(lines)},
            ],
            "temperature": 0.0,
            "max_tokens": self.config.max_tokens,
        }
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return key, body

    def _url(self) -> str:
        return self.config.base_url.rstrip("/") + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        name = self.config.api_key_env
        key = os.environ.get(name, "") if name else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _cached(self, key: str) -> float | None:
        with self._lock:
            score = self._cache.get(key)
            if score is not None:
                self._cache.move_to_end(key)
                self.stats.cache_hits += 1
            return score

    def _scored(self, key: str, reply: httpx.Response, start: float) -> float:
        if reply.status_code != 200:
            raise self._failed(
                start, f"the judge answered HTTP {reply.status_code}: {_shown(reply.text)}"
            )
        try:
            data = reply.json()
            content = data["choices"][0]["message"]["content"]
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise self._failed(start, f"not a chat completion: {_shown(reply.text)}") from None
        match = SCORE.match(str(content or ""))
        score = float(match[1]) if match else -1.0
        if not 0.0 <= score <= 1.0:
            raise self._failed(
                start, f"the judge replied {_shown(str(content))}, not a score in [0, 1]"
            )
        with self._lock:
            self._count(start)
            self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
            if self.config.cache_size:
                self._cache[key] = score
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
        return score

    def _failed(self, start: float, message: str) -> JudgeFailed:
        with self._lock:
            self._count(start)
            self.stats.failures += 1
        return JudgeFailed(f"the judge failed: {message}")

    def _count(self, start: float) -> None:
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start


def _shown(text: str) -> str:
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "...")
