"""Where maxcode keeps its state: everything lives under one folder, ``MAXCODE_HOME``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from maxcode.errors import TaskError

T = TypeVar("T", int, float)


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


def positive_setting(name: str, parse: Callable[[str], T], default: T, kind: str) -> T:
    """The number a ``MAXCODE_*`` variable sets, read with ``parse`` (``default`` when it is
    unset or empty); a ``TaskError`` naming it when its value is not ``kind`` (``a number of
    seconds``) or not above 0."""
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        number = parse(value)
    except ValueError:
        raise TaskError(f"{name}: not {kind}: {value!r}") from None
    if not number > 0:
        raise TaskError(f"{name} must be positive, not {value!r}")
    return number
