"""Agent keys and quotas: who an external agent is, and how much of the server it may hold.

The agent routes (sessions and the OpenAI routes) need ``Authorization: Bearer <agent key>``.
Keys are configured by name (``AgentKeysConfig``, ``ROLLGYM_AGENTS__*``); the name is what
the server records (on sessions and their trajectories) and counts quotas under. The admin
token is never an agent key, nor an agent key the admin token: ``ServerSettings`` refuses a
secret used as both. Secrets are kept as SHA-256 digests and compared in constant time.

    keys = AgentKeys(config)
    agent = keys.identify(authorization)       # 401: no key; 403: not an agent key
    lease = ledger.open_session(agent)         # 429 over max_sessions
    lease.hold_sandbox()                       # 429 over max_sandboxes
    lease.release()                            # on close or expiry (idempotent)
    with ledger.reserve_tokens(agent, n * max_tokens) as hold:   # 429 over tokens_per_minute
        ...generate...
        hold.charge(generated)                 # the rest of the reservation is refunded

Sessions and sandboxes are slots: refused at once when all are held, never queued, so one
agent cannot take the whole sandbox pool (keep ``max_sandboxes`` below the pool's size).
Tokens are a sliding window of ``window_s`` (60 s), and a call *reserves* what it may
generate (its ``max_tokens``, times ``n`` choices) before it runs: it is admitted only if
``charged + reserved + asked <= tokens_per_minute``, where ``charged`` are the tokens
generated in the window and ``reserved`` those held by calls still running; when it ends,
what it generated is charged and the rest refunded. So concurrent calls can never together
generate more than the quota (when the quota was checked before and charged after, 16
calls at once under 500 tokens generated 7,891), and a call whose ``max_tokens`` alone is
over the quota is refused with a 422 that says so (no wait would ever admit it). With
charges ``(t_i, n_i)`` oldest first, ``Retry-After`` is ``t_k + window_s - now`` for the
first k whose expiry leaves room (``charged - (n_1 + ... + n_k) + reserved + asked <=
tokens_per_minute``); when only running calls' reservations are in the way, 1 s.

``allow_anonymous`` (off by default, off in compose) is for local development only: a
request without the header runs as the agent ``"anonymous"`` with the default quota; a
wrong key is still refused.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import hmac
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, model_validator

from rollgym.engine.base import Abandoned
from rollgym.server.errors import BadRequest, QuotaExceeded
from rollgym.server.http.errors import Forbidden, Unauthorized

ANONYMOUS = "anonymous"
SLOT_RETRY_AFTER_S = 5  # a slot frees when a session closes, which the server cannot foresee
RESERVED_RETRY_AFTER_S = 1  # reservations free when running calls end: soon, but unforeseen
AgentName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Clock = Callable[[], float]


class AgentQuota(BaseModel):
    """What one agent key may hold at once, and generate per minute."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_sessions: int = Field(16, ge=1, description="sessions open at once")
    max_sandboxes: int = Field(
        2, ge=0, description="sessions holding a sandbox at once; keep it below the pool's size"
    )
    tokens_per_minute: int = Field(200_000, ge=1, description="tokens generated per minute")


class AgentKeysConfig(BaseModel):
    """``ServerSettings.agents`` (``ROLLGYM_AGENTS__*``); see the module docstring.

    ``keys`` maps a name to its secret (``ROLLGYM_AGENTS__KEYS='{"alice": "..."}'``);
    ``keys_file`` is a JSON file of the same shape (a mounted secret), read at start-up and
    merged in. ``quotas`` overrides ``default_quota`` per name. Validation errors never
    echo their input: it holds the secrets.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    keys: dict[AgentName, SecretStr] = Field(default_factory=dict)
    keys_file: Path | None = None
    quotas: dict[AgentName, AgentQuota] = Field(default_factory=dict)
    default_quota: AgentQuota = Field(default_factory=AgentQuota)
    allow_anonymous: bool = Field(
        False, description="local development: requests without a key run as 'anonymous'"
    )

    @model_validator(mode="after")
    def _usable(self) -> AgentKeysConfig:
        secrets = self.secrets()
        if ANONYMOUS in secrets:
            raise ValueError(f"{ANONYMOUS!r} is not a key name: it is the keyless agent's")
        for name, secret in secrets.items():
            if len(secret.get_secret_value()) < 16:
                raise ValueError(f"agent key {name!r} must be at least 16 characters")
        if len({s.get_secret_value() for s in secrets.values()}) < len(secrets):
            raise ValueError("two agent keys share a secret: each name needs its own")
        if unknown := sorted(set(self.quotas) - set(secrets) - {ANONYMOUS}):
            raise ValueError(f"agents.quotas names no configured key: {unknown}")
        return self

    def secrets(self) -> dict[str, SecretStr]:
        """Every name and its secret: ``keys`` and those of ``keys_file``."""
        merged = dict(self.keys)
        if self.keys_file is not None:
            try:
                table = json.loads(self.keys_file.read_text())
            except (OSError, ValueError) as exc:
                raise ValueError(f"agents.keys_file {self.keys_file}: {exc}") from None
            if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
                raise ValueError(f"agents.keys_file {self.keys_file} must hold {{name: secret}}")
            if both := sorted(set(table) & set(merged)):
                raise ValueError(f"agent keys {both} are in both agents.keys and keys_file")
            merged.update({name: SecretStr(secret) for name, secret in table.items()})
        return merged

    def quota(self, name: str) -> AgentQuota:
        return self.quotas.get(name, self.default_quota)


@dataclasses.dataclass(frozen=True)
class Agent:
    """An authenticated caller of the agent routes."""

    name: str
    quota: AgentQuota


class AgentKeys:
    """The key table: a bearer header in, an ``Agent`` out (or 401/403)."""

    def __init__(self, config: AgentKeysConfig):
        self._table = [
            (_digest(secret.get_secret_value()), Agent(name, config.quota(name)))
            for name, secret in config.secrets().items()
        ]
        self._anonymous = (
            Agent(ANONYMOUS, config.quota(ANONYMOUS)) if config.allow_anonymous else None
        )

    def identify(self, authorization: str | None) -> Agent:
        if not authorization:
            if self._anonymous is not None:
                return self._anonymous
            raise Unauthorized("agent routes need the header 'Authorization: Bearer <agent key>'")
        scheme, _, token = authorization.partition(" ")
        digest = _digest(token.strip())
        found = None
        for expected, agent in self._table:  # no early exit: the time says nothing of the key
            if hmac.compare_digest(digest, expected):
                found = agent
        if found is None or scheme.lower() != "bearer":
            raise Forbidden("the bearer token is not an agent key")
        return found


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@dataclasses.dataclass
class _Usage:
    sessions: int = 0
    sandboxes: int = 0
    charges: collections.deque[tuple[float, int]] = dataclasses.field(
        default_factory=collections.deque
    )  # (when, tokens), oldest first
    charged: int = 0  # the tokens of ``charges``: each call reads it, none sums the window
    reserved: int = 0  # held by calls still running (``TokenHold``)


class QuotaLedger:
    """What each agent holds and has generated; see the module docstring.

    ``refused(agent, quota)`` is told of each refusal (the server's metrics count them).
    """

    def __init__(
        self,
        *,
        clock: Clock = time.monotonic,
        window_s: float = 60.0,
        refused: Callable[[str, str], None] = lambda agent, quota: None,
    ):
        self._clock = clock
        self._window_s = window_s
        self._refused = refused
        self._usage: dict[str, _Usage] = collections.defaultdict(_Usage)

    def open_session(self, agent: Agent) -> SessionLease:
        usage = self._usage[agent.name]
        if usage.sessions >= agent.quota.max_sessions:
            raise self._refuse(
                agent,
                "max_sessions",
                f"{usage.sessions} sessions open; close one first",
                SLOT_RETRY_AFTER_S,
            )
        usage.sessions += 1
        return SessionLease(self, agent)

    def reserve_tokens(self, agent: Agent, tokens: int) -> TokenHold:
        """Hold ``tokens`` of the agent's window for a call about to run (see the module
        docstring): ``QuotaExceeded`` (429) while the window has not that much room,
        ``BadRequest`` (422) if the quota itself is smaller."""
        limit = agent.quota.tokens_per_minute
        if tokens > limit:
            raise BadRequest(
                f"this call may generate {tokens} tokens (max_tokens x n), over the "
                f"tokens_per_minute of agent {agent.name!r} ({limit}): ask for fewer"
            )
        usage = self._usage[agent.name]
        used = self.tokens_used(agent.name)
        over = used + usage.reserved + tokens - limit
        if over > 0:
            raise self._refuse(
                agent,
                "tokens_per_minute",
                f"{used} tokens generated in the last {self._window_s:g} s and "
                f"{usage.reserved} reserved by running calls; this call may generate "
                f"{tokens}, {limit} allowed",
                self._wait_for(usage, over),
            )
        usage.reserved += tokens
        return TokenHold(self, agent, tokens)

    def _wait_for(self, usage: _Usage, over: int) -> int:
        """Seconds until enough charges leave the window to free ``over`` tokens."""
        freed, now = 0, self._clock()
        for when, tokens in usage.charges:
            freed += tokens
            if freed >= over:
                return max(1, math.ceil(when + self._window_s - now))
        return RESERVED_RETRY_AFTER_S

    def _settle(self, agent: Agent, reserved: int, generated: int) -> None:
        usage = self._usage[agent.name]
        usage.reserved -= reserved
        if generated > 0:
            usage.charges.append((self._clock(), generated))
            usage.charged += generated

    def tokens_used(self, name: str) -> int:
        """Tokens ``name`` generated in the window (older charges are dropped here)."""
        usage = self._usage[name]
        cutoff = self._clock() - self._window_s
        while usage.charges and usage.charges[0][0] <= cutoff:
            usage.charged -= usage.charges.popleft()[1]
        return usage.charged

    def held(self, name: str) -> tuple[int, int]:
        """``(sessions, sandboxes)`` that ``name`` holds now."""
        usage = self._usage[name]
        return usage.sessions, usage.sandboxes

    def _refuse(self, agent: Agent, quota: str, detail: str, retry_after_s: int) -> QuotaExceeded:
        self._refused(agent.name, quota)
        return QuotaExceeded(
            f"agent {agent.name!r} is over its quota {quota}: {detail}",
            retry_after_s=retry_after_s,
        )


class TokenHold:
    """The tokens a running call reserved; ``charge`` what it generated, and leaving the
    ``with`` (or ``release``) refunds the rest. Settles once, however the call ends; a call
    whose client left is charged what the engine had generated (``Abandoned``)."""

    def __init__(self, ledger: QuotaLedger, agent: Agent, tokens: int):
        self._ledger, self._agent, self.tokens = ledger, agent, tokens
        self._generated = 0
        self._settled = False

    def charge(self, generated: int) -> None:
        """The call generated ``generated`` tokens (counted when the hold is released)."""
        self._generated += generated

    def release(self) -> None:
        if not self._settled:
            self._settled = True
            self._ledger._settle(self._agent, self.tokens, self._generated)

    def __enter__(self) -> TokenHold:
        return self

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if isinstance(error, Abandoned):
            self.charge(error.generated)
        self.release()


class SessionLease:
    """One session's slot in its agent's quota (and its sandbox slot, once held)."""

    def __init__(self, ledger: QuotaLedger, agent: Agent):
        self.ledger, self.agent = ledger, agent
        self._sandbox = False
        self._released = False

    def hold_sandbox(self) -> None:
        usage = self.ledger._usage[self.agent.name]
        if self._sandbox:
            return
        if usage.sandboxes >= self.agent.quota.max_sandboxes:
            raise self.ledger._refuse(
                self.agent,
                "max_sandboxes",
                f"{usage.sandboxes} sessions hold sandboxes; close one first",
                SLOT_RETRY_AFTER_S,
            )
        usage.sandboxes += 1
        self._sandbox = True

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        usage = self.ledger._usage[self.agent.name]
        usage.sessions -= 1
        usage.sandboxes -= self._sandbox
