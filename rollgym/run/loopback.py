"""An ASGI app served by uvicorn on a free loopback port, inside the running event loop.

For benchmarks and tests that need a real HTTP server *and* the app's insides (its
services on ``app.state``, an engine they wrap): ``server_process`` runs the server as its
own process instead. Leaving the block stops the server (uvicorn's graceful exit)::

    async with on_loopback(create_app(settings)) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            await http.get("/health")
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from rollgym.run.server_process import free_port


@contextlib.asynccontextmanager
async def on_loopback(app: Any, *, log_level: str = "warning") -> AsyncIterator[str]:
    """Serve ``app`` until the block ends; yields its URL (``http://127.0.0.1:<port>``)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
    serving = asyncio.create_task(server.serve())
    while not server.started:  # uvicorn offers no event for it
        if serving.done():  # it failed to start (the lifespan raised): say why
            serving.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
