"""The trainer: pulls versioned trajectories from the server, trains with TRL, pushes weights.

Public interface::

    from rollgym.trainer.client import ServerClient            # HTTP client of the rollout server
    from rollgym.trainer.config import ClientConfig, TrainerConfig
    from rollgym.trainer.loop import train, TrainResult         # one resumable GRPO run
    from rollgym.trainer.pipeline import RunConfig, run_default # `rollgym run`
    from rollgym.trainer.server_process import ServerProcess    # `rollgym serve` as a child process
    from rollgym.trainer.evaluate import evaluate_weights       # held-out success rate

The trainer reaches the server only over HTTP (``trainer.client`` and ``server.wire``).
Errors: ``trainer.errors.TrainerError`` and its subclasses (tree in that module).
See docs/training.md.
"""
