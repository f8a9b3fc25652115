"""Doors between rollgym's environments and other projects' trainers and environments.

Each door is an adapter at the edge around the same envs and sandbox pools:

- ``trl``: ``TrlEnvironments``, a rollgym env id as TRL's ``GRPOTrainer(environment_factory=...)``;
- ``openenv_server``: any registered env served over OpenEnv's HTTP and WebSocket
  interface by openenv-core's own server (``rollgym openenv-serve``, in ``commands``).
"""
