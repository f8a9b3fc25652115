"""rollgym: an RL gym for LLM agents, with a rollout server and a TRL trainer.

One namespace, in layers that import only downward: ``rollgym.contract`` (the HTTP API,
schemas, rules and paths every side shares), ``rollgym.sandboxes`` (Docker boxes),
``rollgym.envs`` (Gymnasium environments), ``rollgym.engine`` (vLLM and weight updates, no
HTTP), ``rollgym.server`` (the rollout server's HTTP application), ``rollgym.trainer`` (the
TRL trainer library), ``rollgym.cluster`` (servers on Ray behind a router), and the
applications on top: ``rollgym.run`` (the built-in run), ``rollgym.data``,
``rollgym.evaluation``, ``rollgym.models`` and ``rollgym.cli`` (the ``rollgym`` command).
The subpackages live in the repository's top-level folders (pyproject's ``package-dir``).
This module imports nothing, so importing any of them stays cheap.
"""

__version__ = "0.1.0"
