"""pydantic-ai on a rollgym session: an ``OpenAIChatModel`` at the session's base URL, the
env's tools as ``Tool``\\ s (their JSON schemas as declared) that run each call by its id::

    async with await AgentSession.open(url, key, "rollgym/ToolUse-v0") as session:
        agent = Agent(chat_model(session), tools=tools(session))
        result = await agent.run(session.messages[-1]["content"], instructions=...)
        if not session.over:
            reply = await session.step()  # a text answer ended the run: the env acts on it
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from rollgym.frameworks.session import AgentSession


def chat_model(session: AgentSession) -> OpenAIChatModel:
    """pydantic-ai's OpenAI chat model on the session's base URL."""
    return OpenAIChatModel(session.model, provider=OpenAIProvider(openai_client=session.openai))


def tools(session: AgentSession) -> list[Tool[Any]]:
    """The env's tools; each call returns what the env answered it."""
    return [_tool(session, spec["function"]) for spec in session.tools]


def _tool(session: AgentSession, function: dict[str, Any]) -> Tool[Any]:
    async def run(context: RunContext[Any], **arguments: Any) -> str:
        assert context.tool_call_id is not None  # pydantic-ai names every call it runs
        return await session.run_tool(context.tool_call_id)

    return Tool.from_schema(
        run,
        name=function["name"],
        description=function.get("description"),
        json_schema=function.get("parameters") or {"type": "object"},
        takes_ctx=True,
    )
