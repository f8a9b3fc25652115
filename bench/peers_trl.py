"""Arm (a) of ``bench.peers``: TRL alone, written the way TRL 1.16's documentation shows.

``GRPOTrainer(environment_factory=...)``: TRL makes one environment per rollout of a batch
(and keeps them for the next), offers the environment's public methods as tools, generates
with transformers in this process, parses each completion's tool calls, calls the methods,
appends the results and generates again, until the model answers without a call or
``max_tool_calling_iterations`` is reached; ``get_reward`` then scores the rollout.

The environment, ``GuessGame``, is GuessTool as a per-exec sandbox client plays it: one
hardened container per environment (the image and flags of rollgym's boxes, network
none), and every guess one ``docker exec`` of the same in-box program rollgym's env runs
(``envs.guess_verdict``), through the Docker SDK's ``exec_run``. The host keeps the
target and judges the reward with GuessTool's own reward callables. Tools are run one
after another (TRL calls synchronous tools in a loop), and so is every ``docker exec``.

What TRL needs told about the default model (its response template) and the warning it
gives are rollgym's TRL door's (``rollgym.doors.trl``), which serves any rollgym env to
TRL through the pool's in-box executor; this arm keeps the per-exec client on purpose.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gymnasium.utils import seeding

from rollgym.doors.trl import quiet_experimental, response_template
from rollgym.envs.errors import ActionError
from rollgym.envs.guess_number import (
    GuessEpisode,
    GuessStep,
    GuessStepReward,
    GuessTerminalReward,
    judge,
    pick_target,
)
from rollgym.envs.guess_tool import check_guess, read_reply, verdict_argv
from rollgym.envs.programs import Meter
from rollgym.sandboxes.base import WORK_DIR
from rollgym.sandboxes.config import SandboxConfig

Exec = Callable[[list[str]], tuple[int, str]]  # argv -> (exit code, stdout), in the box
GAME_OVER = "The game is over."
# Bounds of transformers' continuous batching cache. Left to TRL's default (half the free
# memory), each generate_batch call on this CPU allocates the whole cache anew: a probe at
# transformers' own default (0.9) held ~20 GiB and took 21-31 s to answer 4 prompts x 8
# tokens, where generate takes 0.06 s.
CONTINUOUS_BATCHING = {"num_blocks": 128, "max_batch_tokens": 4096}


class GuessGame:
    """TRL's environment for GuessTool: ``reset``, the tool ``guess``, ``get_reward``.

    ``run`` executes a command in this game's box; ``meter`` adds up the seconds spent in
    ``reset`` and ``guess`` (the environment's share of the run). Public methods other than
    ``reset`` and ``get_reward`` become tools, so helpers here start with ``_``.
    """

    def __init__(
        self, run: Exec, meter: Meter, *, low: int = 1, high: int = 8, max_guesses: int = 3
    ) -> None:
        self._run, self._meter = run, meter
        self._low, self._high, self._max_guesses = low, high, max_guesses
        self._target = low
        self._open = (low, high)
        self._steps: list[GuessStep] = []

    def reset(self, **row: Any) -> None:
        """Draw the target GuessTool draws for the data set row's ``seed``; nothing to add
        to the prompt (the row's prompt is the env's opening)."""
        started = time.perf_counter()
        rng, _ = seeding.np_random(int(row["seed"]))
        self._target = pick_target({}, rng, self._low, self._high)
        self._open, self._steps = (self._low, self._high), []
        self._meter.seconds += time.perf_counter() - started

    # No return annotation: TRL shows the agent what transformers' get_json_schema makes of
    # this signature and docstring, and a return type would add an entry GuessTool's
    # declaration (GUESS_TOOL) has not, so the two arms' prompts would differ.
    def guess(self, number: int):
        """
        Guess the hidden number.

        Args:
            number: Your guess.
        """
        if self._found or len(self._steps) >= self._max_guesses:
            raise ValueError(GAME_OVER)
        started = time.perf_counter()
        try:
            guess = check_guess(int(number), self._low, self._high)
        except ActionError:
            self._steps.append(GuessStep(None, "invalid"))
            raise
        try:
            code, stdout = self._run(verdict_argv(self._open, self._target, guess))
            if code != 0:
                raise RuntimeError(f"the guess tool exited with {code}: {stdout[:200]!r}")
            reply = read_reply(stdout, guess, self._target)
        finally:
            self._meter.seconds += time.perf_counter() - started
        self._open = (reply.low, reply.high)
        self._steps.append(GuessStep(guess, judge(guess, self._target)))
        return reply.text

    def get_reward(self) -> float:
        """GuessTool's rule: the step rewards (a rejected guess costs) and, once found,
        ``1 - turn_cost * (turns - 1)``."""
        steps = sum(GuessStepReward()(step) for step in self._steps)
        return steps + GuessTerminalReward()(GuessEpisode(self._found, len(self._steps)))

    @property
    def _found(self) -> bool:
        return any(step.verdict == "correct" for step in self._steps)


class ExecBoxes:
    """Hardened containers, one per ``start()``, each reached by ``docker exec`` per call.

    The container is created from rollgym's own spec (``container_spec``: image, network
    none, capabilities, read-only root, tmpfs work dirs, limits, init) less the executor:
    its main process sleeps, and nothing is bind-mounted. Commands run as the agent's user
    in the work dir. ``close`` removes every container.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        import docker

        self.config = config or SandboxConfig()
        self.client = docker.from_env()
        self.containers: list[Any] = []
        self._names = itertools.count()

    def start(self) -> Exec:
        from rollgym.sandboxes.agent.identity import User
        from rollgym.sandboxes.docker.provider import container_spec

        nowhere = Path("/nonexistent")  # the executor's mounts, dropped below
        spec = container_spec(self.config, nowhere, nowhere, User(os.getuid(), os.getgid()))
        spec.update(command=["sleep", "infinity"], mounts=[])
        name = f"rollgym-peers-{os.getpid()}-{next(self._names):03d}"
        container = self.client.containers.create(name=name, **spec)
        self.containers.append(container)
        container.start()
        user = f"{self.config.uid}:{self.config.gid}"  # the agent's user, as in rollgym's boxes

        def run(argv: list[str]) -> tuple[int, str]:
            result = container.exec_run(argv, user=user, workdir=WORK_DIR, demux=True)
            stdout, _ = result.output
            return result.exit_code, (stdout or b"").decode("utf-8", errors="replace")

        return run

    def close(self) -> None:
        for container in self.containers:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        self.containers.clear()
        self.client.close()

    def __enter__(self) -> ExecBoxes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class TrlRun:
    """What the TRL arm measured."""

    step_ends: list[float]
    trl_logs: list[dict[str, Any]]
    wall_s: float
    env_s: float


def grpo_config(trainer: Any, *, max_completion_length: int, max_turns: int, cb: bool) -> Any:
    """rollgym's GRPO settings (``grpo_args``) for TRL's own generation and tool loop."""
    from rollgym.trainer.grpo import grpo_args

    return grpo_args(
        trainer,
        max_completion_length=max_completion_length,
        max_tool_calling_iterations=max_turns,
        use_transformers_continuous_batching=cb,
        transformers_continuous_batching_config=CONTINUOUS_BATCHING if cb else None,
        save_strategy="no",  # a TRL user checkpoints rarely; rollgym's arms do every step
    )


def train_trl(
    trainer_config: Any,
    warm_dir: Path,
    game: Callable[[], GuessGame],
    prompts: list[Any],
    *,
    max_completion_length: int,
    max_turns: int,
    continuous_batching: bool,
    meter: Meter,
    final_dir: Path,
) -> TrlRun:
    """Train with TRL's ``GRPOTrainer`` on ``prompts`` (rows of ``prompt`` and ``seed``),
    save the final weights to ``final_dir``."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    step_ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_ends.append(time.time())

    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    tokenizer.response_template = response_template()
    args = grpo_config(
        trainer_config,
        max_completion_length=max_completion_length,
        max_turns=max_turns,
        cb=continuous_batching,
    )
    with quiet_experimental():
        grpo = GRPOTrainer(
            model=str(warm_dir),
            args=args,
            train_dataset=Dataset.from_list(prompts),
            processing_class=tokenizer,
            environment_factory=game,
            callbacks=[Clock()],
        )
    grpo.remove_callback(PrinterCallback)
    meter.seconds = 0.0
    started = time.monotonic()
    grpo.train()
    wall = time.monotonic() - started
    grpo.save_model(str(final_dir))
    return TrlRun(step_ends, list(grpo.state.log_history), wall, meter.seconds)
