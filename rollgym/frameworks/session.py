"""One rollgym session as an agent framework plays it: a base URL, the env's tools, a result
per tool call.

``AgentSession.open`` creates the session (in its GRPO group) and holds what a framework
needs: ``base_url`` (``.../v1/sessions/{id}/v1``: every LLM call there is a turn of this
session, retries included), ``tools`` (the env's, OpenAI function format), ``messages`` (the
opening), ``openai`` (an ``AsyncOpenAI`` client at the base URL). A framework's tool function
returns ``await session.run_tool(call_id)``; a text answer that ends the framework's run is
the model's action too: ``await session.step()`` acts on it and returns the env's reply.
``over`` says when the env ended the episode; leaving the ``async with`` closes the session
(its group is persisted for training once every member closed)::

    async with await AgentSession.open(url, key, "rollgym/ToolUse-v0", group_size=4) as s:
        ...  # the framework's agent on s.base_url with s.tools (rollgym.frameworks.*)
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

import httpx
import openai

from rollgym.contract import api
from rollgym.contract.wire import (
    PolicyInfo,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStepResult,
    ToolCallResult,
)


class EnvAnsweredAsAWhole(Exception):
    """The env answered the model's tool calls with its own messages (``messages``), not one
    tool message per call: the framework's run stops; its next one goes on from them."""

    def __init__(self, messages: list[dict[str, Any]]):
        super().__init__("the env answered the tool calls with its own messages")
        self.messages = messages


class AgentSession:
    """See the module docstring. Made by ``open``; ``http`` is the client it calls with."""

    def __init__(self, http: httpx.AsyncClient, created: SessionCreated, model: str, *, key: str):
        self.http = http
        self.created = created
        self.model = model  # the served model's name, as the OpenAI routes want it
        self.api_key = key
        self.over = False  # the env ended (or cut) the episode
        self.closed: SessionClosed | None = None
        self.base_url = str(http.base_url.join(f"/v1/sessions/{created.session_id}/v1"))
        # openai 3 types its client on httpx2 and takes an httpx one as well (its _httpx2)
        self.openai = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=key,
            http_client=http,  # type: ignore[arg-type]
        )
        self._owns_http = False

    @classmethod
    async def open(
        cls,
        url: str,
        key: str,
        env_id: str,
        *,
        seed: int | None = None,
        group_size: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        http: httpx.AsyncClient | None = None,
        retries: int = 20,
    ) -> AgentSession:
        """Create a session on ``env_id`` at the server ``url`` as agent ``key``. ``http``: a
        client of your own (its base URL is the server's); a full staleness window (429) is
        waited out ``retries`` times, as its ``Retry-After`` says."""
        owned = http is None
        client = http or httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600
        )
        body = SessionCreate(
            env_id=env_id, env_kwargs=env_kwargs or {}, seed=seed, group_size=group_size
        )
        for _ in range(retries):
            made = await client.post(
                api.SESSION_CREATE.path, json=body.model_dump(exclude_none=True)
            )
            if made.status_code != 429:
                break
            await asyncio.sleep(float(made.headers.get("Retry-After", "1")))
        made.raise_for_status()
        policy = PolicyInfo.model_validate((await client.get(api.POLICY.path)).json())
        session = cls(client, SessionCreated.model_validate(made.json()), policy.model, key=key)
        session._owns_http = owned
        return session

    @property
    def session_id(self) -> str:
        return self.created.session_id

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.created.tools or ())

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The opening messages, the conversation every LLM call starts with."""
        return [message.model_dump() for message in self.created.observation]

    async def run_tool(self, call_id: str) -> str:
        """The env's answer to tool call ``call_id`` of the model's last answer (the first
        call asked for steps the env, which runs them all); ``EnvAnsweredAsAWhole`` when the
        env answered the calls otherwise."""
        url = api.SESSION_TOOL_CALL.url(session_id=self.session_id, call_id=call_id)
        answer = await self.http.post(url)
        answer.raise_for_status()
        result = ToolCallResult.model_validate(answer.json())
        self.over = result.terminated or result.truncated
        if result.content is None:
            raise EnvAnsweredAsAWhole([m.model_dump() for m in result.observation or ()])
        return result.content

    async def step(self) -> list[dict[str, Any]]:
        """Act on the model's last answer as it wrote it (a text answer that ended the
        framework's run); the env's reply, for the next run's messages."""
        answer = await self.http.post(
            api.SESSION_STEP.url(session_id=self.session_id), json={"model_answer": True}
        )
        answer.raise_for_status()
        result = SessionStepResult.model_validate(answer.json())
        self.over = result.terminated or result.truncated
        return [message.model_dump() for message in result.observation]

    async def close(self) -> SessionClosed:
        """End the session: its episode goes to its group (trained once the group settles)."""
        if self.closed is None:
            answer = await self.http.delete(api.SESSION_CLOSE.url(session_id=self.session_id))
            answer.raise_for_status()
            self.closed = SessionClosed.model_validate(answer.json())
            if self._owns_http:  # the OpenAI client calls through it: both are done
                await self.http.aclose()
        return self.closed

    async def __aenter__(self) -> AgentSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
