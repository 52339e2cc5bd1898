"""Building C++ programs in the sandbox, with a cache keyed by content hash.

The key covers the compiler's identity, the flags and the source, so a cached binary is
exactly what a fresh compile would give. Failed builds are cached too (their diagnostics).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from maxcode.harness.sandbox import Limits, Sandbox, make_scratch
from maxcode.home import cache_dir

COMPILER = "g++"
SOURCE_NAME = "candidate.cpp"
BINARY_NAME = "prog"
_COMPILE_LIMITS = Limits(wall_s=120, memory_bytes=4 << 30, file_size_bytes=512 << 20)
_DIAGNOSTICS_CHARS = 4000


@dataclass(frozen=True)
class CompileResult:
    """The outcome of building one source."""

    ok: bool
    """A binary was produced."""
    binary: Path | None
    """The cached binary (read it or copy it; never run it in place)."""
    diagnostics: str
    """Compiler messages with file:line positions, bounded; empty when clean."""
    cached: bool
    """Served from the build cache."""
    key: str
    """The cache key (sha256 of compiler, flags and source)."""


@cache
def compiler_identity(compiler: str = COMPILER) -> str:
    """The compiler's path and version line, part of every build key."""
    path = shutil.which(compiler)
    if path is None:
        return f"{compiler} (missing)"
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return f"{os.path.realpath(path)} {version.stdout.splitlines()[0] if version.stdout else ''}"


def build_key(source: str, flags: tuple[str, ...]) -> str:
    """Content hash of everything that determines the binary."""
    blob = json.dumps([compiler_identity(), list(flags), source])
    return hashlib.sha256(blob.encode()).hexdigest()


def build_cpp(source: str, flags: tuple[str, ...], sandbox: Sandbox) -> CompileResult:
    """Compile ``source`` with ``flags`` (from the cache when it was built before)."""
    key = build_key(source, flags)
    entry = cache_dir("build") / key[:2] / key
    hit = _read_entry(entry, key)
    if hit is not None:
        return hit
    if shutil.which(COMPILER) is None:
        return CompileResult(False, None, f"{COMPILER} is not installed", False, key)
    scratch = make_scratch("maxcode-build-")
    try:
        (scratch / SOURCE_NAME).write_text(source, encoding="utf-8")
        result = sandbox.run(
            [COMPILER, *flags, SOURCE_NAME, "-o", BINARY_NAME],
            scratch=scratch,
            limits=_COMPILE_LIMITS,
        )
        diagnostics = bounded_diagnostics(
            (result.stderr + result.stdout.decode(errors="replace")).strip()
        )
        if result.limit_hit:
            diagnostics = f"compiler stopped: {result.limit_hit} limit hit\n{diagnostics}".strip()
        produced = scratch / BINARY_NAME
        ok = result.ok and produced.is_file()
        _write_entry(entry, produced if ok else None, diagnostics)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _read_entry(entry, key, cached=False) or CompileResult(ok, None, diagnostics, False, key)


def _read_entry(entry: Path, key: str, cached: bool = True) -> CompileResult | None:
    meta = entry / "build.json"
    if not meta.is_file():
        return None
    record = json.loads(meta.read_text())
    binary = entry / BINARY_NAME
    ok = bool(record["ok"]) and binary.is_file()
    return CompileResult(ok, binary if ok else None, record["diagnostics"], cached, key)


def _write_entry(entry: Path, binary: Path | None, diagnostics: str) -> None:
    """Publish a cache entry atomically: build it aside, then rename it into place."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
    if binary is not None:
        shutil.copyfile(binary, staging / BINARY_NAME)
        os.chmod(staging / BINARY_NAME, 0o755)
    record = {"ok": binary is not None, "diagnostics": diagnostics}
    (staging / "build.json").write_text(json.dumps(record))
    try:
        os.rename(staging, entry)
    except OSError:
        # Another process published the same key first; its entry is as good as ours.
        shutil.rmtree(staging, ignore_errors=True)


def bounded_diagnostics(text: str) -> str:
    """Compiler output cut to a size a prompt and a store row can carry."""
    if len(text) <= _DIAGNOSTICS_CHARS:
        return text
    return text[:_DIAGNOSTICS_CHARS] + f"\n… ({len(text) - _DIAGNOSTICS_CHARS} more characters)"
