"""rollgym: an RL gym for LLM agents, with a rollout server and a TRL trainer.

The top-level packages are ``sandboxes`` (Docker boxes), ``envs`` (Gymnasium environments),
``server`` (vLLM rollout server) and ``trainer`` (TRL GRPO); this package holds what they
share: data paths, the default model factory and the ``rollgym`` command.
"""

__version__ = "0.1.0"
