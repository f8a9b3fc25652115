"""Chaos: kill -9 the server, then the trainer, during a GRPO run; count what survived.

    .venv/bin/python -m bench.chaos [--steps 12] [--kill-server-at 3] [--kill-trainer-at 7]

A real ``rollgym serve`` (vLLM engine) and a real trainer, each its own process. The
trainer runs ``--steps`` GRPO steps on GuessNumber; once it has logged
``--kill-server-at`` steps the server is killed (SIGKILL to it and its engine process) and
started again on the same data dir and port: it must come back at its last applied
version on those weights, with its rollout job, while the trainer waits and reconnects
(the trainer is stopped, SIGSTOP, from the kill until the restarted server's version is
read, so that a push of its own cannot land first).
Once the trainer has checkpointed ``--kill-trainer-at`` steps it is killed the same way and
started again: it resumes from that checkpoint. (A kill between a step's weight push and
its checkpoint resumes one step back: the restored weights are pushed as a new version, and
groups sampled from the lost step's weights may fall out of the window, dropped and
counted. Waiting for the checkpoint makes that rare, not impossible: the next step may
push before the kill lands; the versions table tells the two cases apart.) Then the run finishes, and the table
counts, from the server's buffer and the trainer's checkpoints (one per step, all kept):

* groups **acked** by the server, and **trained** (in a committed step's checkpoint);
* **lost**: acked but never trained (goal 0; the trainer's window drops are listed apart);
* **trained twice**: in two checkpoints (goal 0);
* the policy version across each kill (the killed server's own store says which version it
  must come back at), and whether the steps' versions never went down.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

GROUP_SIZE, GROUPS_PER_STEP, MAX_STALENESS = 4, 2, 2


@dataclasses.dataclass
class ChaosReport:
    steps: int
    stored: int
    acked: int
    trained: int
    trained_twice: int
    lost: int
    dropped: dict[str, int]
    versions: dict[str, int]  # around each kill
    monotone: bool

    def table(self) -> str:
        rows = [
            ("optimizer steps", self.steps, ""),
            ("groups stored by the server", self.stored, ""),
            ("groups acked", self.acked, ""),
            ("groups trained (checkpointed steps)", self.trained, ""),
            ("lost: acked, never trained", self.lost, "goal 0"),
            ("trained twice", self.trained_twice, "goal 0"),
            ("dropped by the trainer (window, re-sent)", dict(self.dropped), ""),
            ("versions around the kills", self.versions, ""),
            ("step versions never go down", self.monotone, "goal True"),
        ]
        return "\n".join(f"{what:<42}{value!s:<40}{goal}" for what, value, goal in rows)


def run(
    root: Path, model_dir: Path, *, steps: int, kill_server_at: int, kill_trainer_at: int
) -> ChaosReport:
    from rollgym.run.server_process import ServerProcess

    server = ServerProcess(
        model_dir=model_dir,
        data_dir=root / "server",
        threads=1,
        settings={"ROLLGYM_BUFFER__LEASE_TIMEOUT_S": "5", "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024"},
    )
    out = root / "trainer"
    versions: dict[str, int] = {}
    server.start()
    try:
        trainer = _start_trainer(server, model_dir, out, steps)
        _wait_for_step(out, kill_server_at, trainer)
        versions["server before its kill"] = _version(server)
        server.kill()
        os.killpg(trainer.pid, signal.SIGSTOP)  # its next push waits until the version is read
        try:
            versions["server's persisted version at its kill"] = _persisted_version(server)
            server.start()
            versions["server after its restart"] = _version(server)
        finally:
            os.killpg(trainer.pid, signal.SIGCONT)
        _wait_for_checkpoint(out, kill_trainer_at, trainer)
        versions["server at the trainer's kill"] = _version(server)
        _kill(trainer)
        versions["trainer's checkpoint at its kill"] = _checkpoint_version(out)
        trainer = _start_trainer(server, model_dir, out, steps)
        if trainer.wait(timeout=1800) != 0:
            raise RuntimeError(f"the trainer failed: see {out / 'trainer.log'}")
        versions["server at the end"] = _version(server)
    finally:
        server.stop()
    return _count(server.data_dir / "buffer.sqlite3", out, versions)


def _start_trainer(server, model_dir: Path, out: Path, steps: int) -> subprocess.Popen[bytes]:
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "bench.chaos", "trainer", "--url", server.url,
        "--model", str(model_dir), "--out", str(out), "--steps", str(steps),
    ]  # fmt: skip
    env = {**os.environ, "ROLLGYM_ADMIN_TOKEN": server.admin_token, "OMP_NUM_THREADS": "1"}
    with (out / "trainer.log").open("ab") as log:
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_for_step(out: Path, step: int, trainer: subprocess.Popen[bytes]) -> None:
    log = out / "steps.jsonl"
    while not (log.is_file() and len(log.read_text().splitlines()) >= step):
        if trainer.poll() is not None:
            raise RuntimeError(f"the trainer exited early: see {out / 'trainer.log'}")
        time.sleep(0.2)


def _wait_for_checkpoint(out: Path, step: int, trainer: subprocess.Popen[bytes]) -> None:
    from rollgym.trainer.checkpoint import latest_checkpoint, read_state

    while (last := latest_checkpoint(out)) is None or read_state(last).step < step:
        if trainer.poll() is not None:
            raise RuntimeError(f"the trainer exited early: see {out / 'trainer.log'}")
        time.sleep(0.2)


def _checkpoint_version(out: Path) -> int:
    from rollgym.trainer.checkpoint import latest_checkpoint, read_state

    last = latest_checkpoint(out)
    assert last is not None
    return read_state(last).policy_version


def _kill(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _persisted_version(server) -> int:
    """The version the killed server's store names: what it must come back at. A push may
    land between reading ``/health`` and the kill, and the engine's version moves at the
    swap, just before the store commits it: so it can differ from the last one read."""
    from rollgym.engine.weights.store import PolicyStore

    saved = PolicyStore(server.data_dir / "policy").load()
    return 0 if saved is None else saved[1]


def _version(server) -> int:
    import httpx

    return int(httpx.get(f"{server.url}/health", timeout=30).json()["policy_version"])


def _count(buffer: Path, out: Path, versions: dict[str, int]) -> ChaosReport:
    from rollgym.trainer.checkpoint import read_state
    from rollgym.trainer.progress import StepLog

    with sqlite3.connect(buffer) as db:
        states = dict(db.execute("SELECT group_id, state FROM groups").fetchall())
    acked = {group for group, state in states.items() if state == "acked"}
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    per_checkpoint = [read_state(folder).unacked_group_ids for folder in checkpoints]
    trained = Counter(group for ids in per_checkpoint for group in ids)
    last = read_state(checkpoints[-1])
    step_versions = [r.policy_version for r in StepLog(out / "steps.jsonl").read()]
    return ChaosReport(
        steps=last.step,
        stored=len(states),
        acked=len(acked),
        trained=len(trained),
        trained_twice=sum(1 for count in trained.values() if count > 1),
        lost=len(acked - set(trained)),
        dropped=last.dropped.model_dump(),
        versions=versions,
        monotone=all(a <= b for a, b in itertools.pairwise(step_versions)),
    )


def _train(args: argparse.Namespace) -> None:
    """The trainer process: GRPO against the server, resuming from its checkpoints."""
    from bench import quiet_training_output

    quiet_training_output()
    from pydantic import SecretStr

    from rollgym.contract.wire import RolloutJob, SamplingSettings
    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig, TrainerConfig
    from rollgym.trainer.loop import train

    job = RolloutJob(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 8},
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS_PER_STEP,
        max_staleness=MAX_STALENESS,
        max_turns=2,
        sampling=SamplingSettings(temperature=1.0, max_tokens=4),
        drop_zero_variance=False,
    )
    config = TrainerConfig(
        output_dir=args.out,
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS_PER_STEP,
        max_staleness=MAX_STALENESS,
        total_steps=args.steps,
        learning_rate=1e-4,
        keep_checkpoints=args.steps + 1,  # every step's ledger stays, to be counted
        pull_timeout_s=5.0,
        stall_timeout_s=600.0,
    )
    token = SecretStr(os.environ["ROLLGYM_ADMIN_TOKEN"])
    with ServerClient(ClientConfig(url=args.url, admin_token=token)) as client:
        train(
            config, client, args.model, on_ready=lambda: client.start_rollouts(job), printer=print
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    trainer = sub.add_parser("trainer", help="(internal) the trainer process")
    trainer.add_argument("--url", required=True)
    trainer.add_argument("--model", type=Path, required=True)
    trainer.add_argument("--out", type=Path, required=True)
    trainer.add_argument("--steps", type=int, required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--kill-server-at", type=int, default=3)
    parser.add_argument("--kill-trainer-at", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(".data/bench-chaos"))
    args = parser.parse_args()
    if args.command == "trainer":
        _train(args)
        return
    from rollgym.contract import paths

    root = args.out.resolve()
    if root.exists():
        import shutil

        shutil.rmtree(root)
    report = run(
        root,
        paths.default_model_dir(),
        steps=args.steps,
        kill_server_at=args.kill_server_at,
        kill_trainer_at=args.kill_trainer_at,
    )
    print(report.table())
    (root / "report.json").write_text(json.dumps(dataclasses.asdict(report), indent=2))


if __name__ == "__main__":
    main()
