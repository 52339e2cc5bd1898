"""Loading tasks: task folders, and PIE jsonl rows without conversion.

Every problem with the input is a ``TaskError`` with one line that names the file and what is
wrong with it; the command line prints it and exits 2.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from maxcode.errors import TaskError
from maxcode.kinds import KINDS
from maxcode.tasks.model import (
    DEFAULT_CPP_FLAGS,
    FLOAT_ABS_TOL,
    FLOAT_REL_TOL,
    Task,
    TestCase,
    hold_out,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_TEST_FILE = re.compile(r"^(input|output)\.(\d+)\.txt$")

_AbsTol = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
"""An absolute tolerance: a finite number, 0 or more (a TOML or JSON number, not a string)."""
_RelTol = Annotated[float, Field(ge=0, lt=1, strict=True, allow_inf_nan=False)]
"""A relative tolerance: at least 0 and below 1 (1 would accept 0 for any expected value)."""


class _TaskToml(BaseModel):
    """The keys ``task.toml`` may hold."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    kind: str = "cpp"
    description: str = ""
    compile_flags: list[str] = Field(default_factory=lambda: list(DEFAULT_CPP_FLAGS))
    timeout_s: float = Field(default=10.0, gt=0)
    memory_mb: int = Field(default=2048, gt=0)
    repeats: int = Field(default=5, ge=1)
    cpus: int = Field(default=1, ge=1, le=1024)
    held_out: list[int] | None = None
    held_out_share: float | None = Field(default=None, ge=0, lt=1)
    float_abs_tol: _AbsTol = FLOAT_ABS_TOL
    float_rel_tol: _RelTol = FLOAT_REL_TOL


class _PieTolerances(BaseModel):
    """The comparison keys a PIE row may carry (other fields are kept, not interpreted)."""

    model_config = ConfigDict(extra="ignore")

    float_abs_tol: _AbsTol = FLOAT_ABS_TOL
    float_rel_tol: _RelTol = FLOAT_REL_TOL


def load_task(spec: str, pie_tests: str | Path | None = None, scale: float = 1.0) -> Task:
    """Load a task from a folder, a KernelBench problem file (its shape constants multiplied
    by ``scale``), or ``FILE.jsonl#N`` (row number or ``src_id``)."""
    if "#" in spec and spec.split("#", 1)[0].endswith(".jsonl"):
        jsonl, _, row = spec.partition("#")
        return load_pie_row(Path(jsonl), row, _pie_tests_dir(pie_tests))
    path = Path(spec)
    if not path.exists():
        raise TaskError(f"task not found: {spec}")
    if path.is_dir():
        return load_task_folder(path)
    if path.suffix == ".jsonl":
        raise TaskError(f"{spec} is a suite of PIE rows; name one row as {spec}#N")
    if path.suffix == ".py":
        from maxcode.kinds.kernelbench.problem import load_kernelbench_problem

        return load_kernelbench_problem(path, scale)
    raise TaskError(f"{spec}: not a task folder, a KernelBench .py file or a PIE FILE.jsonl#N")


def load_task_folder(folder: Path) -> Task:
    """A folder with ``task.toml``, ``reference.cpp`` and ``tests/``."""
    config_path = folder / "task.toml"
    if not config_path.is_file():
        raise TaskError(f"{folder}: no task.toml")
    try:
        raw = tomllib.loads(_read_text(config_path))
    except tomllib.TOMLDecodeError as error:
        raise TaskError(f"{config_path}: not valid TOML: {error}") from None
    name = raw.get("kind", "cpp")
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None or not kind.in_folders:
        folders = " or ".join(repr(kind.name) for kind in KINDS.values() if kind.in_folders)
        raise TaskError(f"{config_path}: kind {name!r} is not supported (use {folders})")
    return kind.load_folder(folder, raw, config_path)


def load_cpp_folder(folder: Path, raw: dict[str, Any], config_path: Path) -> Task:
    """A C++ task folder: ``task.toml`` (read into ``raw``), ``reference.cpp``, ``tests/``."""
    try:
        config = _TaskToml.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TaskError(f"{config_path}: {where}: {first['msg']}") from None
    reference_path = folder / "reference.cpp"
    if not reference_path.is_file():
        raise TaskError(f"{folder}: no reference.cpp")
    tests = _find_tests(folder / "tests")
    if config.held_out is not None:
        unknown = sorted(set(config.held_out) - {test.index for test in tests})
        if unknown:
            raise TaskError(f"{config_path}: held_out names test {unknown[0]}, which is not there")
        if len(set(config.held_out)) >= len(tests):
            raise TaskError(f"{config_path}: held_out hides every test; show at least one")
    return Task(
        name=config.name or folder.resolve().name,
        kind="cpp",
        reference=_read_text(reference_path),
        tests=hold_out(tests, config.held_out, config.held_out_share),
        origin=str(folder),
        description=config.description,
        compile_flags=tuple(config.compile_flags),
        timeout_s=config.timeout_s,
        memory_mb=config.memory_mb,
        repeats=config.repeats,
        cpus=config.cpus,
        float_abs_tol=config.float_abs_tol,
        float_rel_tol=config.float_rel_tol,
    )


def load_pie_row(jsonl: Path, row: str, tests_root: Path) -> Task:
    """One row of a PIE jsonl file; its tests are ``tests_root/<problem_id>/input.<i>.txt``."""
    record, number = _find_row(jsonl, row)
    where = f"{jsonl}#{row}"
    for key in ("src_code", "problem_id"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise TaskError(f"{where}: the row has no {key}")
    problem = record["problem_id"]
    tests = _find_tests(tests_root / problem)
    wanted = record.get("tests")
    if isinstance(wanted, list) and wanted:
        by_index = {test.index: test for test in tests}
        missing = [index for index in wanted if index not in by_index]
        if missing:
            raise TaskError(f"{where}: tests {missing} not found in {tests_root / problem}")
        tests = tuple(by_index[index] for index in sorted(set(wanted)))
    name = f"{problem}_{record['src_id']}" if record.get("src_id") else f"{problem}_{number}"
    try:
        tolerances = _PieTolerances.model_validate(record)
    except ValidationError as error:
        first = error.errors()[0]
        field_name = ".".join(str(part) for part in first["loc"])
        raise TaskError(f"{where}: {field_name}: {first['msg']}") from None
    interpreted = ("src_code", "tests", *_PieTolerances.model_fields)
    extra = {key: value for key, value in record.items() if key not in interpreted}
    return Task(
        name=name,
        kind="cpp",
        reference=record["src_code"],
        tests=hold_out(tests),
        origin=where,
        description=str(record.get("description", "")),
        float_abs_tol=tolerances.float_abs_tol,
        float_rel_tol=tolerances.float_rel_tol,
        extra=extra,
    )


def _find_row(jsonl: Path, row: str) -> tuple[dict[str, Any], int]:
    text = _read_text(jsonl)
    wanted_number = int(row) if row.isdigit() else None
    for number, line in enumerate(line for line in text.splitlines() if line.strip()):
        if wanted_number is not None and number != wanted_number:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if wanted_number is None:
                continue
            raise TaskError(f"{jsonl}: row {number} is not valid JSON: {error}") from None
        if not isinstance(record, dict):
            if wanted_number is not None:
                raise TaskError(f"{jsonl}: row {number} is not a JSON object")
            continue
        if wanted_number is not None or str(record.get("src_id")) == row:
            return record, number
    raise TaskError(f"{jsonl}: no row {row!r} (give a 0-based row number or a src_id)")


def _pie_tests_dir(given: str | Path | None) -> Path:
    folder = given or os.environ.get("MAXCODE_PIE_TESTS")
    if not folder:
        raise TaskError("a PIE row needs its test folder: --pie-tests DIR or MAXCODE_PIE_TESTS")
    path = Path(folder)
    if not path.is_dir():
        raise TaskError(f"PIE test-case folder not found: {path}")
    return path


def _find_tests(folder: Path) -> tuple[TestCase, ...]:
    if not folder.is_dir():
        raise TaskError(f"{folder}: no tests folder")
    inputs: dict[int, Path] = {}
    outputs: dict[int, Path] = {}
    for entry in folder.iterdir():
        match = _TEST_FILE.match(entry.name)
        if match:
            (inputs if match.group(1) == "input" else outputs)[int(match.group(2))] = entry
    if not inputs and not outputs:
        raise TaskError(f"{folder}: no tests (expected input.N.txt and output.N.txt)")
    if lonely := sorted(set(inputs) - set(outputs)):
        raise TaskError(f"{folder}: input.{lonely[0]}.txt has no output.{lonely[0]}.txt")
    if lonely := sorted(set(outputs) - set(inputs)):
        raise TaskError(f"{folder}: output.{lonely[0]}.txt has no input.{lonely[0]}.txt")
    for index in sorted(inputs):
        for path in (inputs[index], outputs[index]):
            if not os.access(path, os.R_OK) or not path.is_file():
                raise TaskError(f"{path}: cannot be read")
    return tuple(TestCase(index, inputs[index], outputs[index]) for index in sorted(inputs))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not UTF-8 text") from None
    except OSError as error:
        raise TaskError(f"{path}: cannot be read: {error.strerror or error}") from None
