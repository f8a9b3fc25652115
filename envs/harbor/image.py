"""A Harbor task's image: its name, its cache key, and what rollgym adds to its Dockerfile.

The image is built from the task's ``environment/`` (``rollgym tasks build``) and named
by its content alone, so an env finds it without asking Docker, an edit makes a new one,
and tasks with the same ``environment/`` share one image (and its warm boxes)::

    rollgym/task-env:<first 16 hex digits of the sha256 of environment/>

rollgym appends a few lines to the task's Dockerfile (``box_dockerfile``) so that the image
runs as a hardened box: the executor needs ``python3``; the root is read-only and the
agent works in its tmpfs work dir, so the Dockerfile's ``WORKDIR`` (``/app``, say)
becomes a link to ``/work`` and what was there moves to ``/opt/rollgym/seed``, which the
box copies into ``/work`` at every start and reset (``SandboxConfig.seed_dir``); the
oracle's ``/solution`` is a link into ``/tmp``; ``/tests`` and ``/logs`` are the
verifier's own folders (``SandboxConfig.verifier_dirs``). A ``WORKDIR`` that is a system
folder cannot move and fails the build with a message that says so.

``FROM`` lines are read to find the images a Dockerfile needs (``from_images``): with no
registry here, each must be a local image, a stage of the same file, or mapped to a
local image (``rewrite_from``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from rollgym.envs.harbor.task import HarborTask, task_files

REPOSITORY = "rollgym/task-env"
SEED_DIR = "/opt/rollgym/seed"
TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
VERIFIER_DIRS = (TESTS_DIR, LOGS_DIR)
LABEL_TASK = "rollgym.task"
LABEL_BUILD_KEY = "rollgym.task.build-key"
SYSTEM_DIRS = (
    "/bin /boot /dev /etc /lib /lib32 /lib64 /libx32 /opt /proc /run /sbin /sys /tmp /usr "
    "/var /tests /logs /solution"
)
_PREPARE = f"""set -e
command -v python3 >/dev/null 2>&1 || {{ echo "rollgym: the image has no python3 (the sandbox's executor runs on it)" >&2; exit 1; }}
wd="$(pwd)"
for d in {SYSTEM_DIRS}; do
  case "$wd" in "$d"|"$d"/*) echo "rollgym: WORKDIR $wd is in the system folder $d; put the task's files in a folder of their own (such as /app)" >&2; exit 1;; esac
done
mkdir -p {SEED_DIR} /opt/rollgym/agent /run/rollgym /work
rm -rf {TESTS_DIR} {LOGS_DIR}
case "$wd" in
  /) ;;
  /work) cp -a /work/. {SEED_DIR}/ && find /work -mindepth 1 -delete ;;
  *) cp -a "$wd/." {SEED_DIR}/ && rm -rf "$wd" && ln -s /work "$wd" ;;
esac
rm -rf /solution && ln -s /tmp/solution /solution"""


def _box_layer() -> str:
    return (
        "\n\n# --- added by rollgym: the task's image as a hardened sandbox "
        "(rollgym.envs.harbor.image)\n"
        "USER root\n"
        f'RUN ["/bin/sh", "-c", {json.dumps(_PREPARE)}]\n'
        "WORKDIR /work\n"
        "ENTRYPOINT []\n"
        "CMD []\n"
    )


_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(?P<image>\S+)(?:\s+AS\s+(?P<stage>\S+))?\s*$", re.I)
_ARG = re.compile(r"^\s*ARG\s+(?P<name>\w+)(?:=(?P<value>\S*))?\s*$", re.I)


def content_hash(task: HarborTask) -> str:
    """sha256 of ``environment/``: every file's relative path, mode and bytes."""
    digest = hashlib.sha256()
    for relative, path in task_files(task.environment_dir):
        digest.update(f"{relative}\0{path.stat().st_mode & 0o777:o}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def image_tag(task: HarborTask) -> str:
    """The image's name: ``rollgym/task-env:<content hash, 16 digits>``."""
    return f"{REPOSITORY}:{content_hash(task)[:16]}"


def box_dockerfile(dockerfile: str) -> str:
    """The task's Dockerfile with rollgym's box layer appended (see the module docstring)."""
    return dockerfile.rstrip("\n") + _box_layer()


def from_images(dockerfile: str) -> list[tuple[int, str]]:
    """``(line number, image)`` of every ``FROM`` that names an image, not an earlier stage;
    ``ARG`` defaults before the first ``FROM`` are substituted (``FROM ${BASE}``)."""
    return [(number, image) for number, _, image in _froms(dockerfile)]


def rewrite_from(dockerfile: str, mapping: Mapping[str, str]) -> str:
    """``dockerfile`` with each ``FROM`` of a mapped image naming its local image instead."""
    lines = dockerfile.split("\n")
    for number, span, image in _froms(dockerfile):
        if image in mapping:
            line = lines[number - 1]
            lines[number - 1] = line[: span[0]] + mapping[image] + line[span[1] :]
    return "\n".join(lines)


def _froms(dockerfile: str) -> list[tuple[int, tuple[int, int], str]]:
    """Each ``FROM`` of an image: its line number, the image token's span, the image."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    found: list[tuple[int, tuple[int, int], str]] = []
    for number, line in enumerate(dockerfile.split("\n"), start=1):
        arg = _ARG.match(line)
        if arg and not found and not stages and arg["value"] is not None:
            args[arg["name"]] = arg["value"].strip("\"'")
            continue
        match = _FROM.match(line)
        if match is None:
            continue
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), match["image"])
        if image.lower() not in stages and image != "scratch":
            found.append((number, match.span("image"), image))
        stages.add((match["stage"] or f"#{number}").lower())
    return found


def build_key(dockerfile: str, base_ids: Mapping[str, str], task: HarborTask) -> str:
    """What decides whether a built image is still right: the content, the Dockerfile as
    built (mapping and rollgym's layer included) and the ids of the images it starts from."""
    digest = hashlib.sha256(content_hash(task).encode())
    digest.update(dockerfile.encode())
    for image in sorted(base_ids):
        digest.update(f"\0{image}={base_ids[image]}".encode())
    return digest.hexdigest()
