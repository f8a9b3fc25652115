"""The OpenAI Agents SDK on a rollgym session: its model at the session's base URL, the env's
tools as ``FunctionTool``\\ s that run each call by its id.

    async with await AgentSession.open(url, key, "rollgym/ToolUse-v0") as session:
        agent = Agent(name="a", model=chat_model(session), tools=function_tools(session),
                      tool_use_behavior=stop_when_over(session))
        result = await Runner.run(agent, session.messages)
        if not session.over:
            reply = await session.step()  # a text answer ended the run: the env acts on it
"""

from __future__ import annotations

from typing import Any

from agents import (
    FunctionTool,
    FunctionToolResult,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    ToolsToFinalOutputResult,
)
from agents.tool_context import ToolContext

from rollgym.frameworks.session import AgentSession


def chat_model(session: AgentSession) -> OpenAIChatCompletionsModel:
    """The SDK's chat-completions model on the session's base URL."""
    return OpenAIChatCompletionsModel(model=session.model, openai_client=session.openai)


def function_tools(session: AgentSession) -> list[FunctionTool]:
    """The env's tools; each call returns what the env answered it."""
    return [_tool(session, spec["function"]) for spec in session.tools]


def _tool(session: AgentSession, function: dict[str, Any]) -> FunctionTool:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        return await session.run_tool(context.tool_call_id)

    return FunctionTool(
        name=function["name"],
        description=function.get("description", ""),
        params_json_schema=function.get("parameters") or {"type": "object"},
        on_invoke_tool=invoke,
        strict_json_schema=False,  # the env's schema as it is
    )


def stop_when_over(session: AgentSession) -> Any:
    """A ``tool_use_behavior`` that ends the run once the env ended the episode."""

    def behavior(
        context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        return ToolsToFinalOutputResult(is_final_output=session.over)

    return behavior
