"""LangChain on a rollgym session: ``ChatOpenAI`` at the session's base URL, the env's tools
as ``StructuredTool``\\ s that run each call by its id (LangChain hands it over as an
``InjectedToolCallId``, so invoke them with the model's tool calls)::

    async with await AgentSession.open(url, key, "rollgym/ToolUse-v0") as session:
        tools = structured_tools(session)
        llm = chat_model(session).bind_tools(tools)
        messages = session.messages
        while not session.over:
            said = await llm.ainvoke(messages)
            messages.append(said)
            if not said.tool_calls:  # a text answer: the env acts on it
                messages += await session.step()
                continue
            by_name = {tool.name: tool for tool in tools}
            messages += [await by_name[c["name"]].ainvoke(c) for c in said.tool_calls]
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import InjectedToolCallId, StructuredTool
from langchain_openai import ChatOpenAI
from pydantic import create_model

from rollgym.frameworks.session import AgentSession


def chat_model(session: AgentSession, **options: Any) -> ChatOpenAI:
    """``ChatOpenAI`` on the session's base URL (``options``: ChatOpenAI's own)."""
    return ChatOpenAI(
        model=session.model,
        base_url=session.base_url,
        api_key=session.api_key,
        http_async_client=session.http,
        **options,
    )


def structured_tools(session: AgentSession) -> list[StructuredTool]:
    """The env's tools; each call returns what the env answered it."""
    return [_tool(session, spec["function"]) for spec in session.tools]


def _tool(session: AgentSession, function: dict[str, Any]) -> StructuredTool:
    async def run(tool_call_id: str, **arguments: Any) -> str:
        return await session.run_tool(tool_call_id)

    parameters = function.get("parameters") or {}
    required = set(parameters.get("required", ()))
    fields: dict[str, Any] = {
        name: (Any, ... if name in required else None) for name in parameters.get("properties", {})
    }
    # The server renders the env's own schema into the prompt (a session ignores how the
    # client declares its tools), so the arguments are taken as they come.
    schema = create_model(
        f"{function['name']}_arguments",
        tool_call_id=(Annotated[str, InjectedToolCallId], ...),
        **fields,
    )
    return StructuredTool(
        name=function["name"],
        description=function.get("description", ""),
        args_schema=schema,
        coroutine=run,
    )
