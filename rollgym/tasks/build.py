"""``rollgym tasks build DIR``: every task's image, built offline and cached by content.

For each task of the folder (``rollgym.envs.harbor.task``), in order:

1. read ``environment/Dockerfile`` and find the images it starts ``FROM``; each must be a
   local image, or be mapped to one (``BuildConfig.images``: ``--map
   python:3.11-slim=rollgym/base:bookworm``); anything else is a ``RegistryImage`` error
   naming the image and the line, since no registry can be reached;
2. append rollgym's box layer (``rollgym.envs.harbor.image.box_dockerfile``) and compute the
   build key: the content of ``environment/``, the Dockerfile as built and the ids of its
   base images;
3. skip the task if its image (``rollgym/task-<name>:<content hash>``) exists with that
   key (``cached``), else build it with the classic builder, never pulling; a failure
   is a ``BuildFailed`` naming the task and the step.

Each task's line of progress goes to ``progress`` as it finishes (with ``verbose``, every
line of the engine's output too); one task's failure does not stop the others, and the
result lists every task with what happened to it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

import docker
from rollgym.envs.harbor.image import (
    LABEL_BUILD_KEY,
    LABEL_TASK,
    box_dockerfile,
    build_key,
    from_images,
    image_tag,
    rewrite_from,
)
from rollgym.envs.harbor.task import HarborTask, read_tasks, task_files
from rollgym.sandboxes.base import SandboxError
from rollgym.sandboxes.docker.build import (
    ImageBuildError,
    build_image,
    image_id,
    image_labels,
    pack_context,
)
from rollgym.tasks.errors import BuildFailed, RegistryImage, TasksError

Outcome = Literal["built", "cached", "failed"]


class BuildConfig(BaseModel):
    """How to build: registry images mapped to local ones, and whether to ignore the cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    images: dict[str, str] = Field(
        default_factory=dict,
        description="a Dockerfile's FROM image -> the local image to build on instead",
    )
    rebuild: bool = Field(False, description="build even when an image with the key exists")
    verbose: bool = Field(False, description="show every line of the engine's output")

    @field_validator("images")
    @classmethod
    def _no_empty_names(cls, images: dict[str, str]) -> dict[str, str]:
        empty = [k for k, v in images.items() if not k.strip() or not v.strip()]
        if empty:
            raise ValueError(f"image mappings {empty} need a name on both sides of '='")
        return images


@dataclasses.dataclass(frozen=True)
class BuildResult:
    task: str
    image: str
    outcome: Outcome
    seconds: float
    error: str | None = None


def build_tasks(
    folder: str | Path,
    config: BuildConfig | None = None,
    *,
    client: docker.DockerClient | None = None,
    progress: Callable[[str], None] = print,
) -> list[BuildResult]:
    """Build every task's image of ``folder``; see the module docstring."""
    config = config or BuildConfig()
    tasks = read_tasks(folder)
    own = client is None
    client = client or docker.from_env()
    try:
        results = []
        for number, task in enumerate(tasks, start=1):
            result = _build_one(
                client, task, config, f"[{number}/{len(tasks)}] {task.name}", progress
            )
            results.append(result)
        return results
    finally:
        if own:
            client.close()


def _build_one(
    client: docker.DockerClient,
    task: HarborTask,
    config: BuildConfig,
    label: str,
    progress: Callable[[str], None],
) -> BuildResult:
    start = time.perf_counter()
    tag = image_tag(task)
    try:
        dockerfile = rewrite_from(task.dockerfile.read_text(encoding="utf-8"), config.images)
        bases = _base_ids(client, task, dockerfile)
        built = box_dockerfile(dockerfile)
        key = build_key(built, bases, task)
        if not config.rebuild and _has_image(client, tag, key):
            progress(f"{label}: cached ({tag})")
            return BuildResult(task.name, tag, "cached", time.perf_counter() - start)
        progress(f"{label}: building {tag} on {', '.join(sorted(bases)) or 'scratch'}")
        context = pack_context(task_files(task.environment_dir), built)
        build_image(
            client,
            context,
            tag,
            labels={LABEL_TASK: task.name, LABEL_BUILD_KEY: key},
            timeout_s=task.build_timeout_s,
            on_line=(lambda line: progress(f"    {line}"))
            if config.verbose
            else (lambda line: None),
        )
    except ImageBuildError as exc:
        return _failed(
            task, tag, start, BuildFailed(f"task {task.name}: {exc}", exc.step), label, progress
        )
    except (TasksError, SandboxError, OSError, UnicodeDecodeError) as exc:
        return _failed(task, tag, start, exc, label, progress)
    seconds = time.perf_counter() - start
    progress(f"{label}: built in {seconds:.1f} s")
    return BuildResult(task.name, tag, "built", seconds)


def _failed(
    task: HarborTask,
    tag: str,
    start: float,
    exc: Exception,
    label: str,
    progress: Callable[[str], None],
) -> BuildResult:
    message = str(exc) if str(exc).startswith(f"task {task.name}") else f"task {task.name}: {exc}"
    progress(f"{label}: FAILED: {message}")
    return BuildResult(task.name, tag, "failed", time.perf_counter() - start, message)


def _base_ids(client: docker.DockerClient, task: HarborTask, dockerfile: str) -> dict[str, str]:
    """The local id of every image the Dockerfile starts from; ``RegistryImage`` if one
    is not here."""
    ids: dict[str, str] = {}
    for line, image in from_images(dockerfile):
        found = image_id(client, image)
        if found is None:
            raise RegistryImage(
                f"task {task.name}: environment/Dockerfile line {line}: FROM {image} is not a "
                "local image, and no registry can be reached. Build it here, or map it to a "
                f"local image: rollgym tasks build DIR --map {image}=rollgym/base:bookworm"
            )
        ids[image] = found
    return ids


def _has_image(client: docker.DockerClient, tag: str, key: str) -> bool:
    if image_id(client, tag) is None:
        return False
    return image_labels(client, tag).get(LABEL_BUILD_KEY) == key


def summary(results: Sequence[BuildResult]) -> str:
    """One line: how many were built, cached and failed."""
    counts: Mapping[str, int] = {
        outcome: sum(r.outcome == outcome for r in results)
        for outcome in ("built", "cached", "failed")
    }
    return f"{counts['built']} built, {counts['cached']} cached, {counts['failed']} failed"
