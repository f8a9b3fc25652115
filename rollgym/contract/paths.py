"""Where rollgym keeps its data: models, checkpoints, trajectories, run outputs.

One root, ``$ROLLGYM_HOME`` (default ``~/.local/share/rollgym``), so that a compose volume,
a CI cache or a user's disk can hold everything by setting one variable.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL_NAME = "rollgym-tiny"


def data_home() -> Path:
    """The data root: ``$ROLLGYM_HOME``, else ``$XDG_DATA_HOME/rollgym``, else ``~/.local/share/rollgym``."""
    if explicit := os.environ.get("ROLLGYM_HOME"):
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "rollgym"


def models_dir() -> Path:
    return data_home() / "models"


def default_model_dir() -> Path:
    """The built-in default model, made by ``rollgym model init``."""
    return models_dir() / DEFAULT_MODEL_NAME


def runs_dir() -> Path:
    return data_home() / "runs"


def wheels_dir() -> Path:
    """Wheels of PyPI packages that carry model files, kept so later pulls work offline."""
    return data_home() / "wheels"
