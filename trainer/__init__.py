"""The trainer library: pulls versioned trajectories from the server, trains with TRL, pushes
weights back, checkpoints.

Public interface::

    from rollgym.trainer.client import ServerClient        # HTTP client of the rollout server
    from rollgym.trainer.config import ClientConfig, TrainerConfig
    from rollgym.trainer.loop import train, TrainResult     # one resumable GRPO run
    from rollgym.trainer.evaluate import evaluate_weights   # held-out success rate

The trainer reaches the server only over HTTP (``trainer.client``, with the models of
``rollgym.contract``); it imports neither the server nor the envs (a test checks the import
graph). The built-in run that uses it (warm start, a child server, the report) is the
application in ``rollgym.run``. Errors: ``trainer.errors.TrainerError`` and its subclasses
(tree in that module). See docs/training.md.
"""

if __name__ != "rollgym.trainer":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.trainer, not {__name__}: one module, one name")
