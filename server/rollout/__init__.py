"""The rollout runner: many episodes at once, token-faithful, in GRPO groups, with backpressure."""
