"""One policy version for the whole cluster: when an update counts, and how a server catches up.

An update at cluster version ``V`` goes to every server in rotation with
``expected_version=V``. ``settle`` reads the answers:

* every server that applied it now serves ``V + 1``: the cluster is at ``V + 1``;
* a server that failed (an error, no answer, or any version but ``V + 1``) leaves the
  rotation; it is restarted and re-synced before it serves again, so the servers in
  rotation always agree on what version ``V + 1`` means and no trajectory mixes lineages;
* if no server applied it, the cluster stays at ``V``; when every server refused the
  weights with a 4xx (bad weights, a stale expected version), the request was wrong, not
  the servers: nobody leaves the rotation and the refusal goes back to the caller.

A server that rejoins at version ``v < V`` is brought to ``V`` by ``catch_up_steps``
applications of the current weights (the server's version moves by one per update; its
weights are the current ones after the first). A server that restores its last applied
version from its volume is at ``V`` or ``V - 1``: zero or one step. One that comes back at
version 0 on its configured model needs ``V``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from rollgym.contract.wire import ErrorBody


@dataclasses.dataclass(frozen=True)
class Applied:
    version: int


@dataclasses.dataclass(frozen=True)
class Refused:
    """The server answered with an error (``status`` < 500: it refused the weights)."""

    status: int
    error: ErrorBody


@dataclasses.dataclass(frozen=True)
class Unreachable:
    reason: str


Answer = Applied | Refused | Unreachable


@dataclasses.dataclass(frozen=True)
class Settled:
    """The outcome of one update over the rotation."""

    version: int  # the cluster's version now
    applied: tuple[str, ...]  # servers that serve ``version`` now
    evicted: tuple[str, ...]  # servers that leave the rotation to be restarted and re-synced
    refusal: Refused | None = None  # every server refused: the caller's error, passed on


def settle(expected: int, answers: Mapping[str, Answer]) -> Settled:
    """Apply the rules of the module docstring to one update's answers.

    >>> settle(3, {"s0": Applied(4), "s1": Applied(4)})
    Settled(version=4, applied=('s0', 's1'), evicted=(), refusal=None)
    >>> settle(3, {"s0": Applied(4), "s1": Unreachable("reset")}).evicted
    ('s1',)
    >>> bad = Refused(400, ErrorBody(error="bad_weights", message="missing tensors"))
    >>> settle(3, {"s0": bad, "s1": bad}).refusal is bad, settle(3, {"s0": bad}).evicted
    (True, ())
    """
    target = expected + 1
    applied = tuple(
        sorted(s for s, a in answers.items() if isinstance(a, Applied) and a.version == target)
    )
    others = tuple(sorted(s for s in answers if s not in applied))
    if applied:
        return Settled(version=target, applied=applied, evicted=others)
    refusals = [a for a in answers.values() if isinstance(a, Refused) and a.status < 500]
    if answers and len(refusals) == len(answers):
        return Settled(version=expected, applied=(), evicted=(), refusal=refusals[0])
    return Settled(version=expected, applied=(), evicted=others)


def catch_up_steps(server_version: int, cluster_version: int) -> int:
    """Updates a rejoining server needs to serve ``cluster_version`` (see the docstring).

    >>> catch_up_steps(5, 5), catch_up_steps(4, 5), catch_up_steps(0, 5)
    (0, 1, 5)
    """
    if server_version > cluster_version:
        raise ValueError(
            f"the server is at version {server_version}, ahead of the cluster's "
            f"{cluster_version}: its data dir belongs to another run; clear it or the cluster's"
        )
    return cluster_version - server_version
