"""A rollgym env as TRL's ``GRPOTrainer(environment_factory=...)`` (TRL 1.16).

TRL's contract: the factory is called with no arguments and returns an environment; TRL
calls ``reset(**row)`` with each data set row before generating, offers the class's public
methods (other than ``reset`` and ``get_reward``) to the model as tools (their schema is
what transformers' ``get_json_schema`` makes of the signature and the ``Args:`` docstring),
calls them with the arguments the model wrote, turns an exception into an ``{"error": ...}``
tool reply, and calls ``get_reward()`` once the rollout ends. ``TrlEnvironments(env_id)``
builds that class from the env's own tool declarations::

    with TrlEnvironments("rollgym/Compute-v0", pool_size=8) as environments:
        trainer = GRPOTrainer(
            model=model_dir, args=grpo_config, processing_class=tokenizer,
            train_dataset=Dataset.from_list(environments.rows(range(64))),
            environment_factory=environments, reward_funcs=[closing_reward],
        )
        trainer.train()

Each tool call is one ``env.step`` of the message ``<tool_call>{"name", "arguments"}</tool_call>``,
so the env parses, validates and runs it exactly as it does for rollgym's own runner
(sandboxed envs in a box from the factory's Docker pool of ``pool_size`` warm boxes); the
env's ``tool`` replies are the tool's result, a rejected call raises with the env's
feedback. Rewards, in two disjoint parts TRL adds up:

- ``get_reward()``: the rewards of the steps the tools took (the terminal reward included,
  when a tool call ends the episode, as GuessTool's correct guess does);
- ``closing_reward`` (a reward function, pass it in ``reward_funcs``): the reward of the
  rollout's last assistant message as one more step, for envs whose episode ends with
  a text answer (Compute's and ToolUse's ``<answer>...</answer>``); 0.0 when the episode
  already ended or the rollout ended on a call.

An infrastructure failure (a box died, a reward callable crashed) makes both ``None``: TRL
has no way to drop a rollout, and ``None`` is what it ignores in a reward column.

Data set rows come from ``rows(seeds)``: ``{"prompt": <the env's opening for the seed>,
"seed": seed}``; ``reset`` replays the seed and checks the row's prompt is the env's opening
(a row built for other kwargs fails loudly). The seconds spent in ``reset`` and tool calls
add up in ``env_s``. Both the factory and its environments pickle (TRL's async trainers
send them to another process): an environment arrives fresh (TRL resets before use), the
factory without its pool, which it makes again there on first need.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import gymnasium

from rollgym.envs.errors import ActionError, EnvLoadError, InfraError
from rollgym.envs.scripted import tool_call
from rollgym.sandboxes.base import SandboxPool

EPISODE_OVER = "The episode is over: answer without calling a tool."
JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}
RESERVED = ("reset", "get_reward")


class TrlEnvironments:
    """TRL's ``environment_factory`` for one rollgym env; see the module docstring.

    ``env_kwargs`` go to ``rollgym.envs.make``; ``max_turns`` overrides the env's turn
    limit; sandboxed envs share one Docker pool of ``pool_size`` boxes (make it the number
    of rollouts per batch: each holds a box from ``reset`` to the next ``reset``), or the
    ``sandbox_pool`` given (an ``ImagePool`` for Harbor tasks; the caller closes it).
    """

    def __init__(
        self,
        env_id: str,
        *,
        pool_size: int = 4,
        sandbox_pool: SandboxPool | None = None,
        max_turns: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size}")
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self.pool_size, self.max_turns = pool_size, max_turns
        self._given_pool = sandbox_pool
        self._live()

    def _live(self) -> None:
        self._pool: SandboxPool | None = self._given_pool
        self._class: type[TrlEnvironment] | None = None
        self._made: list[TrlEnvironment] = []

    def __call__(self) -> TrlEnvironment:
        """A new environment (TRL makes one per rollout of a batch and keeps them)."""
        if self._class is None:
            self._class = environment_class(self)
        made = self._class()
        self._made.append(made)
        return made

    def rows(self, seeds: Iterable[int]) -> list[dict[str, Any]]:
        """Data set rows: the env's opening for each seed as ``prompt``, and the ``seed``."""
        env = self.make_env()
        try:
            return [
                {"prompt": list(env.reset(seed=int(seed))[0]), "seed": int(seed)} for seed in seeds
            ]
        finally:
            env.close()

    @property
    def env_s(self) -> float:
        """Seconds every environment made here spent in ``reset`` and tool calls."""
        return sum(made.env_s for made in self._made)

    def make_env(self) -> gymnasium.Env[Any, str]:
        """The rollgym env behind one environment (sandboxed ones on this factory's pool)."""
        from rollgym.server.rollout.environments import RegistryEnvs

        return RegistryEnvs(self._sandbox_pool).make(
            self.env_id, self.env_kwargs, max_turns=self.max_turns
        )

    def _sandbox_pool(self) -> SandboxPool:
        if self._pool is None:
            from rollgym.sandboxes.config import PoolConfig
            from rollgym.sandboxes.docker import DockerSandboxPool

            pool = DockerSandboxPool(PoolConfig(size=self.pool_size))
            pool.start()
            self._pool = pool
        return self._pool

    def close(self) -> None:
        """Close every environment made here (their boxes go back), then the pool;
        ``env_s`` still counts them."""
        try:
            for environment in self._made:
                environment._env.close()
        finally:
            if self._pool is not None and self._given_pool is None:
                pool, self._pool = self._pool, None
                pool.close()

    def __enter__(self) -> TrlEnvironments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        if self._given_pool is not None:
            raise TypeError(
                "TrlEnvironments(sandbox_pool=...) cannot be pickled: its pool's boxes live in "
                "this process; give pool_size instead and each process makes its own pool"
            )
        keys = ("env_id", "env_kwargs", "pool_size", "max_turns")
        return {key: getattr(self, key) for key in keys}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _given_pool=None)
        self._live()


class TrlEnvironment:
    """One rollout's environment: a rollgym env behind TRL's protocol.

    Subclasses made by ``environment_class`` add one method per tool of the env.
    """

    _factory: TrlEnvironments

    def __init__(self) -> None:
        self._env = self._factory.make_env()
        self.env_s = 0.0
        self._tool_reward = 0.0
        self._over = False
        self._invalid = False

    def reset(self, **row: Any) -> None:
        """Start the episode of the row's ``seed``; its ``prompt`` must be the env's opening."""
        started = time.perf_counter()
        try:
            seed = row.get("seed")
            opening, _ = self._env.reset(seed=None if seed is None else int(seed))
        finally:
            self.env_s += time.perf_counter() - started
        prompt = row.get("prompt")
        if prompt is None or _texts(prompt) != _texts(opening):
            raise ValueError(
                f"the row's prompt is not what {self._factory.env_id} opens with for seed "
                f"{seed}: build the rows with TrlEnvironments.rows(seeds) on the same kwargs"
            )
        self._tool_reward, self._over, self._invalid = 0.0, False, False

    def get_reward(self) -> float | None:
        """The rewards of the steps the tools took; None after an infrastructure failure."""
        return None if self._invalid else self._tool_reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call as one env step; the env's tool replies, or its feedback raised."""
        if self._over:
            raise ValueError(EPISODE_OVER)
        present = {key: value for key, value in arguments.items() if value is not None}
        messages, reward = self._step(tool_call(name, present))
        self._tool_reward += reward  # a rejected call's penalty included
        replies = [m["content"] for m in messages if m["role"] == "tool"]
        if not replies:
            raise ActionError("\n".join(m["content"] for m in messages))
        return "\n".join(replies)

    def _close_with(self, text: str) -> float:
        """Step the rollout's closing message; its reward (0.0 if the episode was over)."""
        if self._over:
            return 0.0
        return self._step(text)[1]

    def _step(self, action: str) -> tuple[Sequence[dict[str, str]], float]:
        started = time.perf_counter()
        try:
            messages, reward, terminated, truncated, info = self._env.step(action)
        finally:
            self.env_s += time.perf_counter() - started
        self._over = terminated or truncated
        if info["failure"] == "infra":
            self._invalid = True
            raise InfraError(f"{self._factory.env_id}: {info['error']}")
        return messages, float(reward)

    def __reduce__(self) -> tuple[Callable[[TrlEnvironments], TrlEnvironment], tuple[Any]]:
        return _fresh, (self._factory,)


def _fresh(factory: TrlEnvironments) -> TrlEnvironment:
    return factory()


def closing_reward(
    completions: list[Any], environments: list[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """TRL reward function: each rollout's last assistant message as its env's last step.

    See the module docstring; ``None`` for rollouts of other environments and after an
    infrastructure failure.
    """
    rewards: list[float | None] = []
    for completion, environment in zip(completions, environments or (), strict=True):
        if not isinstance(environment, TrlEnvironment) or environment._invalid:
            rewards.append(None)
            continue
        last = completion[-1] if completion else {}
        if last.get("role") != "assistant" or last.get("tool_calls"):
            rewards.append(0.0)
            continue
        try:
            rewards.append(environment._close_with(str(last.get("content") or "")))
        except InfraError:
            rewards.append(None)
    return rewards


def environment_class(factory: TrlEnvironments) -> type[TrlEnvironment]:
    """A ``TrlEnvironment`` subclass with one method per tool ``factory``'s env declares."""
    env = factory.make_env()
    try:
        tools = env.get_wrapper_attr("tools")
    finally:
        env.close()
    if not tools:
        raise EnvLoadError(
            f"{factory.env_id} offers no tools, and TRL's environment_factory acts through "
            "tools: train it with rollgym's server (rollgym run) instead"
        )
    methods = {spec["function"]["name"]: tool_method(spec) for spec in tools}
    name = re.sub(r"\W", "", factory.env_id.split("/")[-1].split(":")[-1].split("-v")[0])
    namespace = {"_factory": factory, "__module__": __name__, **methods}
    return type(name or "Environment", (TrlEnvironment,), namespace)


def tool_method(spec: dict[str, Any]) -> Callable[..., str]:
    """A method that calls the tool an OpenAI function dict declares, typed and documented
    the way transformers' ``get_json_schema`` reads (the env validates the full schema)."""
    function = spec["function"]
    name = str(function["name"])
    if name in RESERVED or name.startswith("_") or not name.isidentifier():
        raise EnvLoadError(f"tool {name!r} cannot be a method of TRL's environment class")
    parameters = function.get("parameters") or {}
    properties: dict[str, Any] = parameters.get("properties", {})
    required = set(parameters.get("required", ()))

    def call(self: TrlEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    # No return annotation: get_json_schema would add it to what the model is shown.
    call.__annotations__ = {}
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    lines = [_one_line(function.get("description") or name), "", "Args:"]
    for arg, schema in properties.items():
        default = inspect.Parameter.empty if arg in required else None
        kind = JSON_TYPES.get(schema.get("type"), str)
        signature.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)
        )
        call.__annotations__[arg] = kind
        lines.append(f"    {arg}: {_one_line(schema.get('description') or arg)}")
    call.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = "\n".join(lines if properties else lines[:1])
    return call


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _texts(messages: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def response_template() -> dict[str, Any]:
    """The response template that parses the default model's replies.

    Its chat template is ChatML with Hermes-style ``<tool_call>`` JSON, which TRL's
    ``add_response_schema`` does not recognise; TRL's error asks for the tokenizer's
    ``response_template``, and Qwen3's (``<tool_call>`` JSON blocks, then the text up to
    ``<|im_end|>``) fits: ``tokenizer.response_template = response_template()``.
    """
    from trl.chat_template_utils import qwen3_template

    return qwen3_template


@contextlib.contextmanager
def quiet_experimental() -> Iterator[None]:
    """Silence TRL's warning that ``environment_factory`` is experimental."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*'environment_factory'.*", category=UserWarning)
        yield
