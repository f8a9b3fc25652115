"""The trajectory buffer: ``store.TrajectoryBuffer`` (durable SQLite: put, a long-poll pull
with leases, ack) and ``archive`` (what left the queue, kept for ``rollgym export``)."""
