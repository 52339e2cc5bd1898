"""Torch's C++ headers parsed once: precompiled ``torch/extension.h`` for candidates' builds.

Every C++ extension ``load_inline`` builds starts with ``#include <torch/extension.h>``, and g++
spends most of a small extension's build parsing it. ``include_folder`` gives the workers a
folder (read-only in the sandbox, on ``CPATH``) holding ``torch/extension.h.gch/``: one
precompiled header per set of ``extra_cflags`` the candidate's ``load_inline`` calls name. g++
looks for it before the real header, checks that it was made by the same compiler with options
and macros compatible with the build at hand, and reads the real header when none is: a header
built for other flags costs nothing but the check, and a build is never different.

The headers are built here, by maxcode, outside any sandbox or timed path, from torch's own
header and flags a candidate cannot extend beyond ``SAFE_FLAG`` (a flag could name a plugin, a
file or a program for g++ to run). A candidate cannot write the folder, so it cannot plant a
header another candidate's build would read. ``MAXCODE_HEADER_CACHE`` names another folder to
keep them in (``0``: none are used).
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from maxcode.home import cache_dir

SAFE_FLAG = re.compile(
    r"-O[0-3sgz]?|-Ofast|-m[a-z0-9][a-z0-9=.,_+-]*|-std=(c|gnu)\+\+[0-9a-z]+|-D[A-Za-z_]\w*"
    r"(=[\w.+-]*)?|-U[A-Za-z_]\w*|-g[0-3]?|-w|-pthread|-W(?![lap],)[a-z0-9=-]*"
    r"|-f(no-)?(fast-math|math-errno|openmp|openmp-simd|unroll-loops|unroll-all-loops|"
    r"peel-loops|trapping-math|finite-math-only|signed-zeros|rounding-math|associative-math|"
    r"reciprocal-math|unsafe-math-optimizations|strict-aliasing|omit-frame-pointer|"
    r"tree-vectorize|tree-loop-vectorize|tree-slp-vectorize|inline-functions|ipa-pta|"
    r"prefetch-loop-arrays|exceptions|rtti|vect-cost-model(=\w+)?|PIC|pic|"
    r"stack-protector(-strong|-all)?)"
)
"""The flags a precompiled header may be built with: options of code generation, language and
macros, none naming a file, a plugin or a program."""

MOST_VARIANTS = 4
"""Precompiled headers kept per compiler and torch (each is about 0.8 GB): the least recently
used goes first."""

_BUILD_S = 600
"""Longest one precompiled header may take to build before the candidate builds without it."""


def include_folder(candidate: str) -> Path | None:
    """The folder to put on the workers' ``CPATH`` for ``candidate``'s C++ builds, its headers
    built first for every flag set its ``load_inline`` calls name (None: nothing to build, or
    turned off)."""
    if os.environ.get("MAXCODE_HEADER_CACHE") == "0" or "load_inline" not in candidate:
        return None
    wanted = [flags for flags in flag_sets(candidate) if all(SAFE_FLAG.fullmatch(f) for f in flags)]
    if not wanted:
        return None
    compiler = shutil.which("g++", path=_worker_path())
    if compiler is None:
        return None
    cache = HeaderCache(compiler)
    built = [flags for flags in wanted if cache.ensure(flags)]
    return cache.folder if built else None


def flag_sets(candidate: str) -> list[tuple[str, ...]]:
    """The ``extra_cflags`` of each ``load_inline`` call in ``candidate``'s source that includes
    torch's header (not ``no_implicit_headers``), read without running it: a literal list, or a
    name the module assigns one to (a call without them: no flags; one whose flags are
    computed: left out)."""
    try:
        tree = ast.parse(candidate)
    except SyntaxError:
        return []
    assigned: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                assigned[target.id] = node.value
    found: list[tuple[str, ...]] = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and _called(call.func) == "load_inline"):
            continue
        given = {keyword.arg: keyword.value for keyword in call.keywords}
        if _literal_true(given.get("no_implicit_headers")):
            continue
        value = given.get("extra_cflags")
        if isinstance(value, ast.Name):
            value = assigned.get(value.id)
        flags = () if value is None else _literal_strings(value)
        if flags is not None and flags not in found:
            found.append(flags)
    return found


def _called(function: ast.expr) -> str:
    if isinstance(function, ast.Attribute):
        return function.attr
    return function.id if isinstance(function, ast.Name) else ""


def _literal_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and bool(node.value)


def _literal_strings(node: ast.expr) -> tuple[str, ...] | None:
    with contextlib.suppress(ValueError, SyntaxError, TypeError):
        value = ast.literal_eval(node)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
    return None


def _worker_path() -> str:
    """The ``PATH`` the workers find g++ on (``runner._environment``)."""
    return f"{Path(sys.executable).parent}:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin"


class HeaderCache:
    """The precompiled headers of one g++ and one torch installation, one per flag set."""

    def __init__(self, compiler: str) -> None:
        self.compiler = os.path.realpath(compiler)
        # Found, not imported: the parent of a CPU evaluation does without torch.
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            raise ImportError("torch is not installed")
        torch_root = Path(spec.origin).parent
        self.includes = [
            str(torch_root / "include"),
            str(torch_root / "include" / "torch" / "csrc" / "api" / "include"),
            sysconfig.get_paths()["include"],
        ]
        version = subprocess.run(
            [self.compiler, "--version"], capture_output=True, text=True, check=False
        ).stdout
        torch_version = importlib.metadata.version("torch")
        identity = "\0".join([self.compiler, version, torch_version, *self.includes])
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        chosen = os.environ.get("MAXCODE_HEADER_CACHE")
        kept = Path(chosen) if chosen else cache_dir("kernelbench")
        self.folder = kept / f"headers-{key}"
        self.variants = self.folder / "torch" / "extension.h.gch"

    def flags(self, extra: tuple[str, ...]) -> list[str]:
        """g++'s options for a header that ``load_inline``'s builds with ``extra`` can use: the
        ones torch's ninja file gives every C++ source, in its order."""
        options = ["-DTORCH_API_INCLUDE_EXTENSION_H"]
        for include in self.includes:
            options += ["-isystem", include]
        return [*options, "-fPIC", "-std=c++20", *extra]

    def ensure(self, extra: tuple[str, ...]) -> bool:
        """Whether a header for ``extra`` is there, built now if not (False: it failed)."""
        name = hashlib.sha256("\0".join(extra).encode()).hexdigest()[:16] + ".gch"
        target = self.variants / name
        if target.is_file() and (self.folder / "torch" / "extension.h").is_file():
            os.utime(target)  # recently used: kept by ``_evict``
            return True
        self.variants.mkdir(parents=True, exist_ok=True, mode=0o755)
        with _locked(self.folder / ".lock"):
            self._forward()
            if target.is_file():
                return True
            partial = self.folder / f".{name}.partial"
            header = Path(self.includes[0]) / "torch" / "extension.h"
            command = [self.compiler, "-x", "c++-header", str(header), "-o", str(partial)]
            try:
                done = subprocess.run(
                    [*command, *self.flags(extra)],
                    capture_output=True,
                    timeout=_BUILD_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                done = None
            if done is None or done.returncode != 0 or not partial.is_file():
                partial.unlink(missing_ok=True)
                return False
            os.chmod(partial, 0o644)
            self._evict(keep=MOST_VARIANTS - 1)
            os.replace(partial, target)
        for folder in (self.folder, self.folder / "torch", self.variants):
            os.chmod(folder, 0o755)
        return True

    def _forward(self) -> None:
        """``torch/extension.h`` beside the precompiled ones, naming torch's own: where g++
        finds a ``.gch`` it cannot use (other flags, or a second ``#include`` of the header, as
        many candidates write), it reads the header of that folder, which then hands over to
        the next folder on the path."""
        forward = self.folder / "torch" / "extension.h"
        if not forward.is_file():
            partial = forward.with_suffix(".partial")
            partial.write_text("#include_next <torch/extension.h>\n", encoding="utf-8")
            os.chmod(partial, 0o644)
            os.replace(partial, forward)

    def _evict(self, keep: int) -> None:
        present = sorted(self.variants.glob("*.gch"), key=lambda path: path.stat().st_mtime)
        for old in present[: max(len(present) - keep, 0)]:
            old.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
