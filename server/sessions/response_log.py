"""The answers a Responses call may continue from (``previous_response_id``).

Each answer is kept as its link in a chain: the response before it and the chat messages
it added (the request's new input, then the answer). A call naming an earlier answer
continues its conversation: the chain's messages, oldest first, then its own input. Only
the agent key that made an answer may name it (another gets 404, as for one that does not
exist), and only from the same session (or from no session, for an answer made without
one): a session's conversation is its own.

The log keeps the last ``capacity`` answers of the server; a chain whose link was dropped
is gone (404). Behind the cluster's router, a session's calls reach one server, so its
chains hold; calls without a session may reach another server.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from rollgym.server.errors import BadRequest, NotFound

ChatMessage = dict[str, Any]
CAPACITY = 4096


@dataclasses.dataclass(frozen=True)
class _Link:
    agent: str
    session_id: str | None
    previous: str | None
    added: tuple[ChatMessage, ...]


class ResponseLog:
    """See the module docstring."""

    def __init__(self, capacity: int = CAPACITY):
        self._capacity = capacity
        self._links: collections.OrderedDict[str, _Link] = collections.OrderedDict()

    def keep(
        self,
        response_id: str,
        *,
        agent: str,
        session_id: str | None,
        previous: str | None,
        added: list[ChatMessage],
    ) -> None:
        self._links[response_id] = _Link(agent, session_id, previous, tuple(added))
        while len(self._links) > self._capacity:
            self._links.popitem(last=False)

    def conversation(
        self, response_id: str, *, agent: str, session_id: str | None
    ) -> list[ChatMessage]:
        """The messages up to and including answer ``response_id``, oldest first."""
        chain: list[_Link] = []
        next_id: str | None = response_id
        while next_id is not None:
            link = self._links.get(next_id)
            if link is None or link.agent != agent:
                raise NotFound(
                    f"previous_response_id {next_id!r}: no such answer (the server keeps its "
                    f"last {self._capacity}): send the whole input instead"
                )
            chain.append(link)
            next_id = link.previous
        if chain[0].session_id != session_id:
            raise BadRequest(
                f"previous_response_id {response_id!r} was answered in session "
                f"{chain[0].session_id!r}, not {session_id!r}: continue it there"
            )
        return [message for link in reversed(chain) for message in link.added]
