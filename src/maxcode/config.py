"""Where maxcode keeps its state: everything lives under one folder, ``MAXCODE_HOME``."""

from __future__ import annotations

import os
from pathlib import Path


def maxcode_home() -> Path:
    """The folder for stores, caches and builds (``MAXCODE_HOME``, default ``~/.maxcode``)."""
    configured = os.environ.get("MAXCODE_HOME")
    home = Path(configured).expanduser() if configured else Path.home() / ".maxcode"
    home.mkdir(parents=True, exist_ok=True)
    return home


def cache_dir(kind: str) -> Path:
    """A cache folder of one kind (``build``, ``llm``, ...) under ``MAXCODE_HOME``."""
    folder = maxcode_home() / "cache" / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder
