"""External-agent sessions: ``manager.SessionManager`` (sessions whose episodes become
trajectories) and ``groups`` (the G sessions on one task that settle as one GRPO group)."""
