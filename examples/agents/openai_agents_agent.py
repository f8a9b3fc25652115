"""An OpenAI Agents SDK agent whose episodes train the policy (``pip install -e '.[agents]'``).

The agent is an ordinary ``agents.Agent`` on the SDK's default model,
``OpenAIResponsesModel`` (the Responses API; ``api="chat"``: ``OpenAIChatCompletionsModel``),
its ``AsyncOpenAI`` client pointed at rollgym's ``/v1`` with the agent key and the session's
header, so every LLM call is one model turn of the session. Its tools are the env's own
(``SessionCreated.tools``, as ``FunctionTool``\\ s): the first tool call of a model turn
steps the session with ``{"model_answer": true}`` (the env acts on the text exactly as the
model wrote it, so the model is credited), and each call returns the observation message
that answers it (``tool_call_ids``), which the SDK sends back as its tool result.

When the model answers without a tool call, the run ends with that text as its final
output; the episode steps the session on it too and goes on with the env's reply as the
next input. A run also ends when a step ends the episode or the env answered the calls
otherwise (refused them with a ``user`` message): the next input then carries the env's
messages as they are, never tool results the session did not see. An answer cut by
``max_tokens`` is an ``incomplete`` Response, which the SDK raises on: the env acts on
it (as chat's agent does on a cut answer) and the episode ends there (``Episode.cut``).

    python -m examples.agents.openai_agents_agent --url http://127.0.0.1:8000 --key "$KEY"
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from typing import Any, Literal, cast

import httpx
import openai
from agents import (
    Agent,
    FunctionTool,
    FunctionToolResult,
    MaxTurnsExceeded,
    Model,
    ModelBehaviorError,
    ModelResponse,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    ToolsToFinalOutputResult,
    TResponseInputItem,
)
from agents.tool_context import ToolContext

from examples.agents.httpx_agent import (
    SESSION_HEADER,
    Task,
    agent_client,
    arguments,
    open_session,
    served_model,
)

NO_TRACING = RunConfig(tracing_disabled=True)  # traces would go to OpenAI's servers


@dataclasses.dataclass
class Episode:
    """One session as the framework saw it: each LLM call's response, each step's reward,
    each tool call's result (its id and what the env answered), and whether its last
    answer was cut by ``max_tokens`` (an LLM call with no response here)."""

    session_id: str
    group_id: str
    replies: list[ModelResponse] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    tool_results: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    closed: dict[str, Any] = dataclasses.field(default_factory=dict)
    cut: bool = False


class SessionSteps(RunHooks[Any]):
    """The session's env behind the framework: its tools step it, its hooks count turns."""

    def __init__(self, http: httpx.AsyncClient, episode: Episode):
        self.http, self.episode = http, episode
        self.over = False  # the env ended the episode
        self.unanswered: list[dict[str, Any]] | None = None  # env messages the run cannot pass
        self._stepped_turn = 0
        self._step: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self.episode.replies.append(response)

    @property
    def awaiting_step(self) -> bool:
        """The model's last answer has not been stepped yet."""
        return self._stepped_turn < len(self.episode.replies)

    async def step(self) -> dict[str, Any]:
        """Step with the model's last answer as it wrote it."""
        stepped = await self.http.post(
            f"/v1/sessions/{self.episode.session_id}/step", json={"model_answer": True}
        )
        stepped.raise_for_status()
        self._step = stepped.json()
        self._stepped_turn = len(self.episode.replies)
        self.episode.rewards.append(self._step["reward"])
        self.over = self._step["terminated"] or self._step["truncated"]
        return self._step

    async def result_of(self, call_id: str) -> str:
        """The env's answer to tool call ``call_id``; the turn's first call steps the env."""
        async with self._lock:
            if self.awaiting_step:
                await self.step()
        observation, ids = self._step["observation"], self._step["tool_call_ids"]
        if ids is None:  # the env did not answer call by call: the run stops, they go as is
            self.unanswered = observation
            return "\n".join(m["content"] for m in observation)
        result = str(observation[ids.index(call_id)]["content"])
        self.episode.tool_results.append((call_id, result))
        return result

    def tool(self, spec: dict[str, Any]) -> FunctionTool:
        """The env's tool ``spec`` (OpenAI function format) as the framework's tool."""
        function = spec["function"]

        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            return await self.result_of(context.tool_call_id)

        return FunctionTool(
            name=function["name"],
            description=function.get("description", ""),
            params_json_schema=function.get("parameters") or {"type": "object"},
            on_invoke_tool=invoke,
            strict_json_schema=False,  # the env's schema as it is
        )

    def stop_unless_answered(
        self, context: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        """The SDK's ``tool_use_behavior``: go on only while the env answers call by call."""
        return ToolsToFinalOutputResult(is_final_output=self.over or self.unanswered is not None)


async def play_episode(
    http: httpx.AsyncClient,
    model: str,
    task: Task,
    *,
    key: str,
    max_turns: int = 4,
    settings: ModelSettings | None = None,
    api: Literal["responses", "chat"] = "responses",
) -> Episode:
    """One session of ``task`` played by an Agents SDK agent, at most ``max_turns`` LLM calls."""
    created = await open_session(http, task)
    episode = Episode(created["session_id"], created["group_id"])
    steps = SessionSteps(http, episode)
    client = openai.AsyncOpenAI(
        base_url=str(http.base_url.join("/v1")),
        api_key=key,
        default_headers={SESSION_HEADER: episode.session_id},
    )
    agent = Agent(
        name="rollgym-agent",
        model=_model(api, model, client),
        model_settings=settings or ModelSettings(),
        tools=[steps.tool(spec) for spec in created["tools"] or ()],
        tool_use_behavior=steps.stop_unless_answered,
    )
    history: list[TResponseInputItem] = list(created["observation"])
    try:
        while not steps.over and len(episode.replies) < max_turns:
            left = max_turns - len(episode.replies)
            result = await Runner.run(
                agent, history, hooks=steps, max_turns=left, run_config=NO_TRACING
            )
            history = await _next_input(steps, result.to_input_list())
    except MaxTurnsExceeded:
        pass  # the turn budget is spent (the last answer's tools have run)
    except openai.ConflictError as exc:
        if _error_code(exc) != "context_full":
            raise  # otherwise the episode is over: the model's context is full
    except ModelBehaviorError as exc:
        if "status=incomplete" not in str(exc):
            raise  # otherwise the answer was cut by max_tokens: the env acts on it, the end
        episode.cut = True
        await steps.step()
    finally:
        await client.close()
    closed = await http.delete(f"/v1/sessions/{episode.session_id}")
    closed.raise_for_status()
    episode.closed = closed.json()
    return episode


def _model(api: str, model: str, client: openai.AsyncOpenAI) -> Model:
    if api == "chat":
        return OpenAIChatCompletionsModel(model=model, openai_client=client)
    return OpenAIResponsesModel(model=model, openai_client=client)


async def _next_input(
    steps: SessionSteps, history: list[TResponseInputItem]
) -> list[TResponseInputItem]:
    """What the next run starts from, once the last one ended (see the module docstring)."""
    if steps.awaiting_step:  # a text answer ended the run: it is the model's action too
        if not steps.episode.replies[-1].output:  # an empty answer leaves no item behind
            history.append({"role": "assistant", "content": ""})
        return [*history, *(await steps.step())["observation"]]
    if steps.unanswered is not None:  # the env answered the calls with its own messages
        while history and history[-1].get("type") == "function_call_output":
            history.pop()
        history += cast(list[TResponseInputItem], steps.unanswered)
        steps.unanswered = None
    return history


def _error_code(exc: openai.APIStatusError) -> str | None:
    """rollgym's error code (``ErrorBody.error``), which the client keeps as the body."""
    body = exc.body.get("error") if isinstance(exc.body, dict) else exc.body
    return body if isinstance(body, str) else None


async def main(args: argparse.Namespace) -> None:
    task = Task(env_id=args.env_id, seed=args.seed, group_size=args.group_size)
    settings = ModelSettings(temperature=1.0, max_tokens=args.max_tokens)
    async with agent_client(args.url, args.key) as http:
        model = await served_model(http)
        episodes = await asyncio.gather(
            *(
                play_episode(
                    http, model, task, key=args.key, max_turns=args.max_turns, settings=settings
                )
                for _ in range(task.group_size)
            )
        )
    for episode in episodes:
        print(
            json.dumps(
                {
                    "session_id": episode.session_id,
                    "rewards": episode.rewards,
                    "llm_calls": len(episode.replies),
                    "closed": episode.closed,
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(arguments(__doc__.split("\n\n")[0]).parse_args()))
