"""``doctor(config) -> Report``: every check on one model (and env); ``preflight`` for a
pipeline: the same, its table printed, ``DoctorFailed`` when a check fails; ``before_run``
is ``preflight`` on what ``rollgym run`` is about to train."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from rollgym.doctor import probes
from rollgym.doctor.checks import (
    CONTEXT,
    LOGPROBS,
    PREFIX,
    PROBE_CONVERSATION,
    PROBE_TOOL,
    TOOLS,
    Check,
    context_fits,
    template_prefix,
    tool_round_trip,
)

if TYPE_CHECKING:
    from rollgym.run.pipeline import RunConfig

ENV = "env plays"
ORDER = (PREFIX, TOOLS, CONTEXT, ENV, probes.SANDBOX, LOGPROBS)
PLAYED_TURNS = 3


class DoctorFailed(Exception):
    """A check failed; the message is the report's table."""


class DoctorConfig(BaseModel):
    """What to check: the model, the env the run plays, and the run's sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_dir: Path
    env_id: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_turns: int | None = Field(None, ge=1, description="default: the env's turn limit")
    max_tokens: int = Field(64, ge=1, description="sampled per turn")
    max_model_len: int = Field(2048, ge=64, description="the engine's context")
    logprobs: bool = Field(True, description="start vLLM and transformers to compare them")
    tolerance: float = Field(0.02, gt=0, description="largest logprob difference allowed")
    tool_parser: str | None = Field(
        None, description="vLLM's tool parser the server reads calls with; default: the catalog's"
    )


@dataclasses.dataclass(frozen=True)
class Report:
    title: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.checks)

    def table(self) -> str:
        """A line per check (status and reason), then the verdict.

        >>> print(Report("rollgym doctor m", (Check("a", "pass", "fine"), Check("bb", "skip", "no env"))).table())
        rollgym doctor m
        check  status  reason
        a      pass    fine
        bb     skip    no env
        every check passes
        """
        width = max(len("check"), *(len(check.name) for check in self.checks))
        lines = [self.title, f"{'check':<{width}}  status  reason"]
        lines += [f"{c.name:<{width}}  {c.status:<6}  {c.reason}" for c in self.checks]
        failed = sum(check.status == "fail" for check in self.checks)
        lines.append(
            f"{failed} check{'s' * (failed > 1)} failed" if failed else "every check passes"
        )
        return "\n".join(lines)


def doctor(config: DoctorConfig) -> Report:
    """Every check (see the package docstring), in ``ORDER``; never raises for a failed one."""
    from rollgym.server.conversation.codec import ChatCodec, ChatTemplateError

    where = f" {config.env_id}" if config.env_id else ""
    title = f"rollgym doctor {config.model_dir}{where}"
    try:
        codec = ChatCodec.from_model_dir(config.model_dir)
    except ChatTemplateError as exc:
        unusable = Check(PREFIX, "fail", str(exc))
        rest = (Check(name, "skip", "no usable chat template") for name in ORDER[1:])
        return Report(title, (unusable, *rest))
    found: dict[str, Check] = {}
    opening, turns = list(PROBE_CONVERSATION[0]), list(PROBE_CONVERSATION[1])
    tools: list[dict[str, Any]] | None = None
    prefix = template_prefix(codec, opening, turns)
    if config.env_id is None:
        for name in (CONTEXT, ENV, probes.SANDBOX):
            found[name] = Check(name, "skip", "no env named")
        found[TOOLS] = _tools_check(codec, [PROBE_TOOL], config)
    else:
        with _env(config, found) as env:
            if env is not None and (played := _play(env, config, codec, found)) is not None:
                opening, turns, tools = played
                if prefix.status == "pass":  # the env's own conversation, with its tools
                    own = template_prefix(codec, opening, turns, tools)
                    why = f"the probe's {prefix.reason}; the env's {own.reason}"
                    prefix = own if own.status == "fail" else Check(PREFIX, "pass", why)
    found[PREFIX] = prefix
    if config.logprobs:
        found[LOGPROBS] = probes.logprobs(
            config.model_dir,
            probes.probe_prompts(codec, opening, turns, tools),
            max_model_len=config.max_model_len,
            tolerance=config.tolerance,
        )
    else:
        found[LOGPROBS] = Check(LOGPROBS, "skip", "not asked for")
    return Report(title, tuple(found[name] for name in ORDER if name in found))


def preflight(config: DoctorConfig, printer: Callable[[str], object] = print) -> Report:
    """``doctor``, its table printed; ``DoctorFailed`` (with the table) if a check failed."""
    report = doctor(config)
    printer(report.table())
    if not report.ok:
        raise DoctorFailed(report.table())
    return report


def before_run(run: RunConfig, printer: Callable[[str], object] = print) -> Report:
    """``preflight`` on the run's model, task and sizes. The logprob check stays with
    ``rollgym doctor``: it starts vLLM, and a run's own process never holds vLLM and the
    trainer's torch at once (the server has its own)."""
    task = run.task
    config = DoctorConfig(
        model_dir=run.model_dir,
        env_id=task.env_id,
        env_kwargs=task.env_kwargs,
        max_turns=task.max_turns,
        max_tokens=task.max_tokens,
        logprobs=False,
    )
    return preflight(config, printer)


@contextlib.contextmanager
def _env(config: DoctorConfig, found: dict[str, Check]) -> Iterator[Any]:
    """The env as the server makes it, on a one-box pool when it runs in a sandbox."""
    from rollgym.server.errors import ServerError
    from rollgym.server.rollout.environments import RegistryEnvs, takes_pool

    assert config.env_id is not None
    pool_needed = takes_pool(config.env_id)
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(probes.sandbox(found)) if pool_needed else None
        if not pool_needed:
            found[probes.SANDBOX] = Check(probes.SANDBOX, "skip", "the env runs no sandbox")
        elif pool is None:
            found[ENV] = Check(ENV, "fail", "no sandbox to play it in")
            yield None
            return
        try:
            env = RegistryEnvs(lambda: pool).make(
                config.env_id, config.env_kwargs, max_turns=config.max_turns
            )
        except ServerError as exc:
            found[ENV] = Check(ENV, "fail", str(exc))
            yield None
            return
        try:
            yield env
        finally:
            env.close()


def _play(
    env: Any, config: DoctorConfig, codec: Any, found: dict[str, Check]
) -> tuple[list[Any], list[Any], list[dict[str, Any]] | None] | None:
    """Play the env; its checks (env, tools, context) into ``found``; None if it broke."""
    from rollgym.server.rollout.episode import env_tools, opening_budget

    try:
        opening, turns = probes.play(env, PLAYED_TURNS)
    except Exception as exc:  # a user's env may raise anything: the check says what
        found[ENV] = Check(ENV, "fail", f"it raised {exc!r}"[:300])
        return None
    found[ENV] = Check(ENV, "pass", f"{len(turns)} turns played from its opening")
    tools = env_tools(env)
    no_tools = Check(TOOLS, "skip", "the env has no tools")
    found[TOOLS] = _tools_check(codec, tools, config) if tools else no_tools
    budget = opening_budget(
        codec, env, opening, max_tokens=config.max_tokens, max_model_len=config.max_model_len
    )
    found[CONTEXT] = context_fits(budget)
    return opening, turns, tools


def _tools_check(codec: Any, tools: list[dict[str, Any]], config: DoctorConfig) -> Check:
    """``tool_round_trip`` with the parser the server would use for the model."""
    from rollgym.envs.toolformats import ToolCallParser, ToolParserError
    from rollgym.models.catalog import tool_parser_for

    family = config.tool_parser or tool_parser_for(config.model_dir)
    try:
        parser = ToolCallParser(family, codec.tokenizer)
    except ToolParserError as exc:
        return Check(TOOLS, "fail", str(exc))
    return tool_round_trip(codec, tools, parser)
