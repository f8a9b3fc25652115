"""Building a sandbox image offline: the classic builder, a context we pack, errors by step.

No registry is reachable here, so a build never pulls (``pull=False``) and every image a
Dockerfile starts from must already be in the engine (``image_id`` says whether it is).
The Docker engine's classic builder is used (the HTTP API's default; there is no buildx),
fed a tar of the context that the caller packed (``pack_context``), so the Dockerfile that
is built may differ from the one on disk (rollgym adds its box layer to a task's). The
build's output streams to ``on_line``; a failed build raises ``ImageBuildError`` naming the
step that failed (``Step 3/7 : RUN make``) and the engine's message.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import docker

from ..base import SandboxError
from .engine import docker_errors

_STEP = re.compile(r"^Step \d+/\d+ : .*")
LOG_TAIL_LINES = 8


class ImageBuildError(SandboxError):
    """A build failed; ``step`` is the Dockerfile step it failed at (None: before any)."""

    def __init__(self, message: str, step: str | None) -> None:
        super().__init__(message)
        self.step = step


def image_id(client: docker.DockerClient, name: str) -> str | None:
    """The id of the local image ``name``, or None when the engine has no such image."""
    try:
        with docker_errors(f"looking up image {name}"):
            return str(client.api.inspect_image(name)["Id"])
    except SandboxError as exc:
        if isinstance(exc.__cause__, docker.errors.ImageNotFound):
            return None
        raise


def image_labels(client: docker.DockerClient, name: str) -> dict[str, str]:
    """The labels of local image ``name`` (empty when it has none)."""
    with docker_errors(f"looking up image {name}"):
        config = client.api.inspect_image(name).get("Config") or {}
    return dict(config.get("Labels") or {})


def pack_context(files: Iterable[tuple[str, Path]], dockerfile: str) -> bytes:
    """A tar of ``(name in the context, file)`` pairs plus ``Dockerfile`` (replacing any)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, path in files:
            if name == "Dockerfile":
                continue
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0  # the same files, the same context
            with path.open("rb") as handle:
                archive.addfile(info, handle)
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build_image(
    client: docker.DockerClient,
    context: bytes,
    tag: str,
    *,
    labels: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
    on_line: Callable[[str], None] = lambda line: None,
) -> str:
    """Build ``context`` (a tar with a ``Dockerfile``) as ``tag``; return the image id."""
    step: str | None = None
    tail: list[str] = []
    with docker_errors(f"building {tag}"):
        stream = client.api.build(
            fileobj=io.BytesIO(context),
            custom_context=True,
            tag=tag,
            labels=dict(labels or {}),
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            timeout=int(timeout_s),
        )
        for chunk in stream:
            text = str(chunk.get("stream", "")).rstrip("\n")
            for line in text.splitlines():
                if _STEP.match(line):
                    step, tail = line, []
                elif line.strip() and not line.startswith(" ---> "):
                    tail = [*tail, line][-LOG_TAIL_LINES:]  # what the step itself printed
                on_line(line)
            if "error" in chunk:
                message = str(chunk["error"]).strip()
                where = f" at {_short(step)!r}" if step else ""
                printed = "".join(f"\n    {line}" for line in tail)
                raise ImageBuildError(f"the build failed{where}: {message}{printed}", step)
    built = image_id(client, tag)
    if built is None:
        last = "\n".join(tail)
        raise ImageBuildError(f"the build of {tag} ended without an image:\n{last}", step)
    return built


def _short(step: str, limit: int = 160) -> str:
    """A step's line, cut: rollgym's own step is a long script."""
    return step if len(step) <= limit else step[: limit - 3] + "..."
