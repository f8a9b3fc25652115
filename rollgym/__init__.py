"""rollgym: an RL gym for LLM agents, with a rollout server and a TRL trainer.

One namespace, in layers that import only downward: ``rollgym.contract`` (the schemas,
rules and paths every side shares), ``rollgym.sandboxes`` (Docker boxes),
``rollgym.envs`` (Gymnasium environments), ``rollgym.server`` (the vLLM rollout server),
``rollgym.trainer`` (the TRL trainer library), and the applications on top:
``rollgym.run`` (the built-in run) and ``rollgym.cli`` (the ``rollgym`` command). This
module imports nothing, so importing any of them stays cheap.
"""

__version__ = "0.1.0"
