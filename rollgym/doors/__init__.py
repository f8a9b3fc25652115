"""Doors between rollgym's environments and other projects' trainers and environments.

Each door is an adapter at the edge around the same envs and sandbox pools:

- ``trl``: ``TrlEnvironments``, a rollgym env id as TRL's ``GRPOTrainer(environment_factory=...)``.
"""
