"""The HTTP plumbing every request passes: ``guards`` (a body cap, a last-resort error
answer) and ``offload`` (long CPU work off the event loop). It imports nothing of the rest
of the server."""
