"""The errors of ``rollgym tasks``: one root, each message naming the task.

::

    TasksError
    ├── RegistryImage(TasksError)    a Dockerfile starts FROM an image that is not here and
    │                                no registry can be reached; map it to a local image
    └── BuildFailed(TasksError)      a task's image did not build: the step and the engine's
                                     message
"""

from __future__ import annotations


class TasksError(Exception):
    """Root of the errors of ``rollgym tasks``."""


class RegistryImage(TasksError):
    """A ``FROM`` image that is neither local nor mapped to a local one."""


class BuildFailed(TasksError):
    """A task's image did not build; ``step`` is the Dockerfile step it failed at."""

    def __init__(self, message: str, step: str | None = None) -> None:
        super().__init__(message)
        self.step = step
