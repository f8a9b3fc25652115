"""The rollout server: the HTTP application on the engine floor (``rollgym.engine``): rollouts,
sessions, the trajectory buffer, weight updates over HTTP, metrics.

Importing this package is cheap; the engine (and vLLM) load only when an app is created.
``rollgym.contract.wire`` holds the HTTP schema that clients such as the trainer depend on.

    app.py            create_app(settings): routers, lifespan, services on app.state
    config.py         ServerSettings (ROLLGYM_* variables) and one config per component
    errors.py         ServerError and its tree; the engine's errors' statuses
    serve.py          ``rollgym serve``
    routes/           one router per area: agents (health, policy, sessions), openai,
                      admin (token: weights, rollouts, buffer), archive, dashboard
    rollout/          admission (the staleness window), seed order, group filter, one
                      episode, the RolloutRunner, held-out evaluations
    sessions/         external-agent sessions and their GRPO groups
    conversation/     messages to tokens once, the per-turn prefix check, tool calls, the
                      one episode recorder
    buffer/           the durable SQLite buffer (put, long-poll pull with leases, ack) and
                      its archive
    access/           agent keys and quotas, the envs each lane may make
    observability/    the Prometheus registry, ObservedEngine, Server-Timing, the loop
                      watch, the cost board
    dashboard/        the live page: the stages' spans, periodic readings, the assets
    http/             what every request passes: a body cap, a last-resort error answer
"""

if __name__ != "rollgym.server":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.server, not {__name__}: one module, one name")
