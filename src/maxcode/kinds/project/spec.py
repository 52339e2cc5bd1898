"""Project tasks: a folder of the user's own code, with commands to build, check and bench it.

``task.toml`` of a project (``kind = "project"``)::

    name = "slowpkg"
    kind = "project"
    editable = ["slowpkg/core.py", "slowpkg/paths.py"]   # files (or globs) the policy rewrites
    check = "python -m pytest -q tests"                   # exit 0 = correct
    bench = "python bench.py"                             # what is timed, or what prints the cost
    bench_metric = "wall"                                 # wall | printed | instructions
    build = ""                                            # optional, run before check and bench
    held_out = ["python -m pytest -q hidden_tests"]       # optional checks whose output is withheld
    hidden = ["hidden_tests"]                             # files never shown in prompts

A file may also mark the part the policy may change: lines holding ``maxcode: begin`` and
``maxcode: end`` (in any comment syntax). Such a file is editable only between its markers.

The program of a project task (``Task.reference``, every candidate of the search) is a
*bundle*: each editable file as a fenced block whose info string names its path::

    ```python slowpkg/core.py
    ...
    ```

A bundle whose first line starts with ``!edit-error:`` is an answer whose edits could not be
applied: the evaluator reports the message as a build error, nothing is run.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from maxcode.errors import TaskError
from maxcode.tasks.model import Task

ProjectMetric = Literal["wall", "printed", "instructions"]

EDIT_ERROR = "!edit-error:"
"""First line of a bundle whose edits failed to apply."""
REGION_BEGIN = "maxcode: begin"
REGION_END = "maxcode: end"
SKIPPED = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox"})
"""Folders never copied into an evaluation (version control, caches)."""
MAX_FILES = 5000
"""More files than this in a project folder is refused (a copy per evaluation)."""

_LANGUAGES = {
    ".py": "python",
    ".pyx": "cython",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".rs": "rust",
    ".go": "go",
    ".js": "javascript",
    ".ts": "typescript",
    ".java": "java",
    ".jl": "julia",
    ".sh": "bash",
    ".toml": "toml",
    ".txt": "text",
    ".cmake": "cmake",
}


class _ProjectToml(BaseModel):
    """The keys a project's ``task.toml`` may hold."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    kind: Literal["project"] = "project"
    description: str = ""
    editable: list[str] = Field(min_length=1)
    check: str = Field(min_length=1)
    bench: str = Field(min_length=1)
    bench_metric: ProjectMetric = "wall"
    bench_pattern: str | None = None
    build: str = ""
    held_out: list[str] = Field(default_factory=list)
    hidden: list[str] = Field(default_factory=list)
    visible: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=60.0, gt=0)
    build_timeout_s: float = Field(default=600.0, gt=0)
    memory_mb: int = Field(default=4096, gt=0)
    repeats: int = Field(default=5, ge=1)
    cpus: int = Field(default=1, ge=1, le=1024)


@dataclass(frozen=True)
class ProjectSpec:
    """What a project task adds to ``Task``: where the code is and how to judge it."""

    root: Path
    """The project folder (never written: every evaluation works on fresh copies)."""
    editable: tuple[str, ...]
    """Relative paths of the files the policy may rewrite (globs expanded), sorted."""
    check: str
    """Shell command whose exit status 0 means correct (the user's tests)."""
    bench: str
    """Shell command that is timed, or that prints the cost (``bench_metric``)."""
    metric: ProjectMetric = "wall"
    """wall: the bench command's wall time; printed: the number it prints (lower is better);
    instructions: its instructions under callgrind (every process it starts)."""
    bench_pattern: str | None = None
    """printed: a regular expression whose first group is the cost (default: the last number
    on stdout)."""
    build: str = ""
    """Shell command run once per copy before check and bench (empty: nothing to build)."""
    held_out: tuple[str, ...] = ()
    """Further checks: they must pass too, but their output is never shown."""
    hidden: tuple[str, ...] = ()
    """Relative paths (files or folders) never shown in prompts and present in a copy only
    while the held-out checks run."""
    visible: tuple[Path, ...] = ()
    """Further host folders the commands see read-only (a toolchain outside /usr)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables set for every command."""
    build_timeout_s: float = 600.0
    """Wall-clock limit of the build."""
    files: frozenset[str] = frozenset()
    """Every file of the project (relative paths), for telling a read-only file from an
    unknown one."""
    regions: frozenset[str] = frozenset()
    """Editable files that are editable only between their ``maxcode: begin/end`` markers."""


def load_project_folder(folder: Path, raw: dict[str, Any], config_path: Path) -> ProjectTask:
    """A project task from its folder and its parsed ``task.toml``."""
    try:
        config = _ProjectToml.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TaskError(f"{config_path}: {where}: {first['msg']}") from None
    root = folder.resolve()
    files = project_files(root)
    editable: list[str] = []
    for pattern in config.editable:
        clean = _relative(pattern, config_path, "editable")
        matched = sorted(path for path in files if fnmatch.fnmatchcase(path, clean))
        if not matched:
            raise TaskError(f"{config_path}: editable names {pattern!r}, which matches no file")
        editable += [path for path in matched if path not in editable]
    if "task.toml" in editable:
        raise TaskError(f"{config_path}: task.toml cannot be editable")
    for command_name in ("check", "bench", "build"):
        command = getattr(config, command_name)
        if command.strip():
            try:
                shlex.split(command)
            except ValueError as error:
                raise TaskError(f"{config_path}: {command_name}: {error}") from None
    if config.bench_pattern is not None:
        try:
            compiled = re.compile(config.bench_pattern)
        except re.error as error:
            raise TaskError(f"{config_path}: bench_pattern: {error}") from None
        if compiled.groups < 1:
            raise TaskError(f"{config_path}: bench_pattern needs a group around the number")
    hidden = tuple(_relative(path, config_path, "hidden") for path in config.hidden)
    for path in hidden:
        if any(_inside(name, path) for name in editable):
            raise TaskError(f"{config_path}: hidden {path!r} holds an editable file")
    visible = []
    for entry in config.visible:
        shown = Path(os.path.expanduser(entry))
        if not shown.is_absolute() or not shown.exists():
            raise TaskError(f"{config_path}: visible {entry!r} is not an existing absolute path")
        visible.append(shown.resolve())
    texts = {}
    for path in editable:
        try:
            texts[path] = (root / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise TaskError(f"{root / path}: an editable file must be UTF-8 text") from None
    regions = frozenset(path for path, text in texts.items() if REGION_BEGIN in text)
    for path in regions:
        problem = region_problem(texts[path], texts[path])
        if problem:
            raise TaskError(f"{root / path}: {problem}")
    spec = ProjectSpec(
        root=root,
        editable=tuple(editable),
        check=config.check,
        bench=config.bench,
        metric=config.bench_metric,
        bench_pattern=config.bench_pattern,
        build=config.build,
        held_out=tuple(config.held_out),
        hidden=hidden,
        visible=tuple(visible),
        env=dict(config.env),
        build_timeout_s=config.build_timeout_s,
        files=frozenset(files),
        regions=regions,
    )
    return ProjectTask(
        name=config.name or root.name,
        kind="project",
        reference=render_bundle(texts),
        tests=(),
        origin=str(folder),
        description=config.description,
        compile_flags=(),
        timeout_s=config.timeout_s,
        memory_mb=config.memory_mb,
        repeats=config.repeats,
        cpus=config.cpus,
        project=spec,
    )


@dataclass(frozen=True, kw_only=True)
class ProjectTask(Task):
    """A project: ``reference`` is the bundle of its editable files as they are (a candidate
    is stored and shown as such a bundle, ``render_bundle``), ``tests`` is empty."""

    project: ProjectSpec
    """The folder, the editable files and the build, check and bench commands."""

    def reference_files(self) -> dict[str, str]:
        """The editable files as they are, by relative path."""
        return parse_bundle(self.reference).files


def project_files(root: Path) -> list[str]:
    """Every file of a project folder as a relative POSIX path (caches and VCS skipped)."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(name for name in dirs if name not in SKIPPED)
        for name in names:
            path = Path(folder, name)
            if path.is_file() or path.is_symlink():
                found.append(path.relative_to(root).as_posix())
        if len(found) > MAX_FILES:
            raise TaskError(f"{root}: more than {MAX_FILES} files; name a smaller folder")
    return sorted(found)


def _relative(path: str, config_path: Path, key: str) -> str:
    clean = PurePosixPath(path.strip().removeprefix("./"))
    if not path.strip() or clean.is_absolute() or ".." in clean.parts:
        raise TaskError(f"{config_path}: {key} {path!r} must be a path inside the project")
    return clean.as_posix()


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def is_hidden(spec: ProjectSpec, path: str) -> bool:
    """Whether a relative path lies under one of the task's hidden paths."""
    return any(_inside(path, hidden) for hidden in spec.hidden)


# --- bundles ---------------------------------------------------------------------------------


def language_of(path: str) -> str:
    """The fence tag for a file, from its suffix (``CMakeLists.txt`` is cmake)."""
    if PurePosixPath(path).name == "CMakeLists.txt":
        return "cmake"
    return _LANGUAGES.get(PurePosixPath(path).suffix.lower(), "text")


def _fence_for(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    return "`" * max(3, longest + 1)


def render_bundle(files: dict[str, str], error: str | None = None) -> str:
    """Files as fenced blocks named by path, in path order (a fence longer than any run of
    backticks in the file, so a file holding fences stays one block)."""
    parts = [f"{EDIT_ERROR} {' '.join(error.split())}\n"] if error else []
    for path in sorted(files):
        text = files[path]
        if text and not text.endswith("\n"):
            text += "\n"
        fence = _fence_for(text)
        parts.append(f"{fence}{language_of(path)} {path}\n{text}{fence}\n")
    return "\n".join(parts)


@dataclass(frozen=True)
class Bundle:
    """A parsed bundle: the files it names, or why its edits failed."""

    files: dict[str, str]
    """Relative path -> full text."""
    error: str | None = None
    """The edit error it carries, when its edits could not be applied."""


def parse_bundle(text: str) -> Bundle:
    """The files of a bundle (see the module's docstring); a block whose info string names no
    path is skipped."""
    from maxcode.kinds.answers import find_code_blocks

    error = None
    first = text.lstrip("\n").split("\n", 1)[0]
    if first.startswith(EDIT_ERROR):
        error = first[len(EDIT_ERROR) :].strip() or "the edits could not be applied"
    files: dict[str, str] = {}
    for block in find_code_blocks(text):
        words = block.info.split()
        if len(words) >= 2 and block.complete:
            files[words[1]] = block.code
    return Bundle(files, error)


def region_problem(original: str, candidate: str) -> str:
    """Empty when ``candidate`` differs from ``original`` only between ``maxcode: begin`` and
    ``maxcode: end`` marker lines; else what is wrong."""
    fixed_original, problem = _outside_regions(original)
    if problem:
        return problem
    fixed_candidate, problem = _outside_regions(candidate)
    if problem:
        return "the rewrite broke the editable-region markers: " + problem
    if fixed_original != fixed_candidate:
        return "the rewrite changed lines outside the maxcode: begin/end markers"
    return ""


def _outside_regions(text: str) -> tuple[list[str], str]:
    outside: list[str] = []
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if REGION_BEGIN in line:
            if inside:
                return [], f"line {number}: a second 'maxcode: begin' before 'maxcode: end'"
            inside = True
            outside.append(line.strip())
        elif REGION_END in line:
            if not inside:
                return [], f"line {number}: 'maxcode: end' without 'maxcode: begin'"
            inside = False
            outside.append(line.strip())
        elif not inside:
            outside.append(line.rstrip())
    if inside:
        return [], "a 'maxcode: begin' is never closed by 'maxcode: end'"
    return outside, ""


def write_bundle(bundle: str, folder: Path) -> None:
    """Write a bundle's files under ``folder`` (its paths checked to stay inside)."""
    files = parse_bundle(bundle).files
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        relative = PurePosixPath(path)
        if relative.is_absolute() or ".." in relative.parts:
            continue
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
