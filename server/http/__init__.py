"""The HTTP face every request passes, shared with the cluster's router: a floor that imports
nothing of the rest of the server (the layout test checks).

    errors.py      HttpError (the root of the server's and the router's errors), the admin
                   token's two, the one set of error handlers
    auth.py        the admin check and the admin token's rule (AdminToken)
    declared.py    routes as rollgym.contract.api declares them, on a FastAPI router
    guards.py      a body cap, a last-resort error answer (ASGI middleware)
    offload.py     a request's long CPU work off the event loop
"""
