"""N rollout servers on Ray behind one session-aware router, with one policy version.

A package above ``rollgym.server`` (the server knows nothing of the cluster)::

    routing.py     the router's rules: sticky sessions, least-loaded new work, budget split
    versions.py    when an update counts cluster-wide; how a server catches up
    fleet.py       the slots (servers) in and out of rotation, their load, the pick
    work.py        rollout jobs split over servers; pulls from every buffer; acks to owners
    control.py     the control plane: start, watch, recover, fan weights out
    weights.py     the cluster's staged copy of the weights it serves
    servers.py     one server over HTTP (aiohttp): admin calls and forwarding
    supervisor.py  Ray: servers as actors with resources and restarts
    actor.py       ServerHost, the actor that is one ``rollgym serve``
    aggregate.py   /metrics and the dashboard's data over every server
    archive.py     the archive over every server, by one cursor
    router.py      the router app: one entry point, the API of one server (its routes are
                   rollgym.contract.api's; errors and the admin check, rollgym.server.http's)
    metrics.py     the router's own metrics; status.py: ``GET /admin/cluster``
    config.py      ClusterConfig (ROLLGYM_CLUSTER__*); errors.py: the error tree
    commands.py    ``rollgym cluster up | status | down``

See ``docs/cluster.md``.
"""

if __name__ != "rollgym.cluster":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.cluster, not {__name__}: one module, one name")
