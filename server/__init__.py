"""The rollout server: the HTTP application on the engine floor (``rollgym.engine``): rollouts,
sessions, the trajectory buffer, weight updates over HTTP, metrics.

Importing this package is cheap; the engine (and vLLM) load only when an app is created.
``rollgym.contract.wire`` holds the HTTP schema that clients such as the trainer depend on.

    app.py            create_app(settings): routers, lifespan, services on app.state
    config.py         ServerSettings (ROLLGYM_* variables) and one config per component
    observability/    ObservedEngine: every generation handed to metrics, dashboard, cost
    chat.py           messages to tokens once (template diffing); transcript.py: the
                      per-turn prefix check
    rollout/          admission (staleness window), seed order, group filter, one
                      episode, the RolloutRunner
    buffer.py         durable SQLite buffer: put, long-poll pull with leases, ack
    sessions.py       external-agent sessions whose episodes become trajectories
    metrics.py        the Prometheus registry (and the sandbox pool's metrics)
    routes/           agents (health, metrics, sessions), openai, admin (token)
    serve.py          ``rollgym serve``
"""

if __name__ != "rollgym.server":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.server, not {__name__}: one module, one name")
