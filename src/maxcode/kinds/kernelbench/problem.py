"""KernelBench problem files: a PyTorch ``Model`` (the reference), ``get_inputs()``,
``get_init_inputs()``, and module-level shape constants.

Files are read and checked without importing them (no code runs in the controlling process).
A problem can be scaled down to a CPU's size (``--scale``): its sizes are rewritten in the
source, its hyper-parameters kept (``scaling`` says how it tells them apart); the scaled
source is the task's reference, and what was scaled is in its description.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from maxcode.errors import TaskError
from maxcode.kinds.kernelbench.scaling import Scaling, scale_problem
from maxcode.pyast import parse
from maxcode.tasks.model import Task

KERNELBENCH_TIMEOUT_S = 600.0
KERNELBENCH_MEMORY_MB = 16384
REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")
PROBLEM_FILE = re.compile(r"^(\d+)_.*\.py$")


def shape_constants(source: str) -> dict[str, int]:
    """Module-level ``NAME = <int>`` assignments (the shapes a problem is defined with)."""
    constants: dict[str, int] = {}
    for statement in parse(source).body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(statement.value, ast.Constant)
            and type(statement.value.value) is int
        ):
            constants[statement.targets[0].id] = statement.value.value
    return constants


def scaled_constants(source: str, scale: float) -> dict[str, int]:
    """The integer module constants whose value ``scale`` changes, with their new values."""
    return scale_problem(source, scale).overrides


SIZE_BLIND_ERRORS = (
    "AttributeError",
    "NameError",
    "UnboundLocalError",
    "ImportError",
    "ModuleNotFoundError",
    "SyntaxError",
    "IndentationError",
    "NotImplementedError",
)
"""Exceptions whose cause is the code, never the sizes: a reference failing with one is broken
whatever ``--scale`` did."""


def reference_failure(task: Task, why: str) -> str:
    """The one-line error of a reference that does not run, naming the scaling when the task
    was scaled and sizes may be the cause (with the override that undoes it)."""
    scaling = task.scaling if isinstance(task, KernelBenchTask) else None
    if scaling is None or scaling.scale == 1.0:
        return f"{task.origin}: the reference does not run: {why}"
    if why.startswith(SIZE_BLIND_ERRORS):
        # Errors no size causes: the problem's own, at any scale.
        return f"{task.origin}: the reference does not run (at any scale): {why}"
    return (
        f"{task.origin}: the problem does not run at scale {scaling.scale:g}: {why} "
        f"({scaling.note()}; a '# maxcode: keep NAME' comment in the problem keeps a constant)"
    )


@dataclass(frozen=True, kw_only=True)
class KernelBenchTask(Task):
    """A KernelBench problem: ``reference`` is its source at the sizes it is run at."""

    scaling: Scaling
    """How its sizes were scaled (``scale`` 1.0: as published), with the scaled constants."""
    original: str
    """The problem's source as published (the sizes ``--check-scale`` scales from)."""
    constants: dict[str, int] = field(default_factory=dict, compare=False)
    """Its plain integer module constants as published (``shape_constants``)."""


def load_kernelbench_problem(path: Path, scale: float = 1.0) -> KernelBenchTask:
    """A KernelBench problem file as a task (checked, not run)."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TaskError(f"{path}: cannot be read: {error}") from None
    try:
        tree = parse(source, filename=str(path))
    except SyntaxError as error:
        raise TaskError(f"{path}:{error.lineno}: syntax error: {error.msg}") from None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    if "Model" not in classes:
        raise TaskError(f"{path}: no class Model (the reference nn.Module)")
    if not any(_base_name(base) == "Module" for base in classes["Model"].bases):
        raise TaskError(f"{path}: class Model does not derive from nn.Module")
    if not any(
        isinstance(item, ast.FunctionDef) and item.name == "forward"
        for item in classes["Model"].body
    ):
        raise TaskError(f"{path}: class Model has no forward()")
    missing = [name for name in REQUIRED_FUNCTIONS if name not in functions]
    if missing:
        raise TaskError(f"{path}: missing {', '.join(f'{name}()' for name in missing)}")
    scaling = _scaling(source, scale, str(path))
    docstring = ast.get_docstring(classes["Model"]) or ""
    description = docstring.strip().splitlines()[0] if docstring.strip() else ""
    if scale != 1.0:
        description = f"{description} ({scaling.note()})".strip()
    return KernelBenchTask(
        name=path.stem,
        kind="kernelbench",
        reference=scaling.source,
        tests=(),
        origin=str(path),
        description=description,
        # One limit for a whole worker run: importing torch, building extensions, all calls.
        timeout_s=KERNELBENCH_TIMEOUT_S,
        memory_mb=KERNELBENCH_MEMORY_MB,
        scaling=scaling,
        original=source,
        constants=shape_constants(source),
    )


def _scaling(source: str, scale: float, origin: str) -> Scaling:
    """The problem's source at ``scale`` (unchanged at 1.0); a TaskError names ``origin``."""
    try:
        return scale_problem(source, scale) if scale != 1.0 else Scaling(scale, source)
    except TaskError as error:
        raise TaskError(f"{origin}: {error}") from None


def rescaled(task: KernelBenchTask, scale: float) -> KernelBenchTask:
    """``task`` (a KernelBench problem) at other shapes: its original sizes times ``scale``, as
    ``--scale`` would make them. TaskError when that gives the task's own shapes."""
    scaling = _scaling(task.original, scale, task.origin)
    if scaling.source == task.reference:
        raise TaskError(
            f"{task.origin}: scale {scale:g} gives the problem's own shapes (choose another "
            "--check-scale)"
        )
    return replace(task, reference=scaling.source, scaling=scaling)


def kernelbench_suite(folder: Path) -> list[Path]:
    """The problem files of a KernelBench level folder (``<id>_<Name>.py``), by id."""
    found = [
        (int(match.group(1)), entry)
        for entry in folder.iterdir()
        if entry.is_file() and (match := PROBLEM_FILE.match(entry.name))
    ]
    if not found:
        raise TaskError(f"{folder}: no KernelBench problem files (<id>_<Name>.py)")
    return [path for _, path in sorted(found)]


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Attribute):
        return base.attr
    if isinstance(base, ast.Name):
        return base.id
    return ""
