"""``ServerHost``: the Ray actor that is one rollout server, in its own worker process.

The actor process *is* the server: ``__init__`` binds a free port and runs the app of
``rollgym serve`` (``rollgym.server.app.create_app``) on uvicorn in a thread, configured by
the ``ROLLGYM_*`` variables Ray put in the process's environment (``runtime_env``). The
server knows nothing of the cluster. If the process dies (SIGKILL, OOM), Ray starts a new
one with the same arguments (``max_restarts``): the new server reopens the same data dir,
so its buffer (and whatever the server persists there) comes back; the control plane
re-syncs its weights before it takes traffic.

This module is imported by Ray workers; it imports the server only inside the actor.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time


@dataclasses.dataclass(frozen=True)
class Whereabouts:
    """Where an incarnation of a server answers, and which process it is."""

    url: str
    pid: int
    serving: bool  # uvicorn finished its start-up (the engine is up)
    failed: str | None  # why the server thread ended, if it did
    node_id: str  # the Ray node it runs on (a restart may move it)

    @property
    def incarnation(self) -> tuple[str, int]:
        """Which process this is: a pid alone repeats across nodes (and containers)."""
        return self.node_id, self.pid


class ServerHost:
    """One rollout server in this process (see the module docstring)."""

    def __init__(self, host: str | None) -> None:
        """``host``: where to listen; None: this node's address (a multi-node cluster)."""
        import ray
        import uvicorn

        from rollgym.server.app import create_app
        from rollgym.server.config import ServerSettings
        from rollgym.server.serve import listen

        self._node_id = ray.get_runtime_context().get_node_id()
        if host is None:
            host = ray.util.get_node_ip_address()
        settings = ServerSettings(host=host, port=0)
        self._listener = listen(host, 0)
        port = self._listener.getsockname()[1]
        self._url = f"http://{host}:{port}"
        # Each request's access line would flood Ray's worker logs: warnings and errors only.
        self._server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
        self._failed: str | None = None
        self._thread = threading.Thread(target=self._serve, name="rollgym-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self._server.run(sockets=[self._listener])
        except BaseException as exc:  # the thread's end is reported by where()
            self._failed = repr(exc)
        else:
            if not self._server.started:
                self._failed = "the server stopped during start-up (see this worker's log)"

    def where(self) -> Whereabouts:
        return Whereabouts(
            url=self._url,
            pid=os.getpid(),
            serving=bool(self._server.started),
            failed=self._failed if not self._thread.is_alive() else None,
            node_id=self._node_id,
        )

    def stop(self, timeout_s: float) -> bool:
        """Shut the server down as SIGTERM would (runner, sessions, buffer, pool, engine)."""
        self._server.should_exit = True
        deadline = time.monotonic() + timeout_s
        self._thread.join(max(deadline - time.monotonic(), 0))
        return not self._thread.is_alive()

    def __repr__(self) -> str:  # Ray names the worker process after it
        return f"ServerHost({self._url})"
