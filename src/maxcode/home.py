"""Where maxcode keeps its state: everything lives under one folder, ``MAXCODE_HOME``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from maxcode.errors import MaxcodeError, TaskError

T = TypeVar("T", int, float)


def maxcode_home() -> Path:
    """The folder for stores, caches and builds (``MAXCODE_HOME``, default ``~/.maxcode``)."""
    configured = os.environ.get("MAXCODE_HOME")
    home = Path(configured).expanduser() if configured else Path.home() / ".maxcode"
    _make(home)
    return home


def cache_dir(kind: str) -> Path:
    """A cache folder of one kind (``build``, ``llm``, ...) under ``MAXCODE_HOME``."""
    folder = maxcode_home() / "cache" / kind
    _make(folder)
    return folder


def _make(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise MaxcodeError(
            f"MAXCODE_HOME: cannot make {folder}: {error.strerror or error};"
            " point MAXCODE_HOME at a writable folder with free space"
        ) from None


def write_problem(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (full, read-only, missing), or None when a
    small file can be written and removed there."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".maxcode-check-") as probe:
            probe.write(b"x" * 4096)
            probe.flush()
    except OSError as error:
        return f"{folder} cannot be written: {error.strerror or error}"
    return None


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
