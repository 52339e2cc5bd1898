"""Torch's precompiled headers (``kinds.kernelbench.headers``): which builds get one, with
which flags, and that g++ uses it in a build as torch's ``load_inline`` runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from maxcode.kinds.kernelbench.headers import SAFE_FLAG, HeaderCache, flag_sets, include_folder

CANDIDATE = """
from torch.utils.cpp_extension import load_inline
FLAGS = ["-O3", "-march=native"]
a = load_inline(name="a", cpp_sources="", functions=[], extra_cflags=["-O2", "-fopenmp"])
b = load_inline("b", "", extra_cflags=FLAGS)
c = load_inline("c", "")
d = load_inline("d", "", extra_cflags=["-O3"] + more())
e = load_inline("e", "", extra_cflags=["-O1"], no_implicit_headers=True)
f = cpp_extension.load_inline("f", "", extra_cflags=["-O2", "-fopenmp"])
"""


def test_the_flags_of_each_build_that_includes_torchs_header_are_read_without_running_it() -> None:
    """Literal flags and a module-level name for them; none given is torch's defaults; flags
    computed at run time, and a build without torch's header, ask for nothing."""
    assert flag_sets(CANDIDATE) == [("-O2", "-fopenmp"), ("-O3", "-march=native"), ()]
    assert flag_sets("def broken(:\n") == []


@pytest.mark.parametrize(
    "flag",
    [
        "-fplugin=/tmp/evil.so",
        "-wrapper",
        "@/tmp/options",
        "-B/tmp/bin",
        "-Wl,-rpath,/tmp",
        "-Wp,-include,/tmp/x.h",
        "-include",
        "-I/tmp",
        "-isystem/tmp",
        "-specs=/tmp/specs",
        "-o",
        "--sysroot=/tmp",
        "-fdump-tree-all",
        "-fprofile-generate",
        "-x",
        "-D A",
    ],
)
def test_a_flag_that_could_reach_a_file_or_a_program_builds_no_header(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header is built outside the sandbox: a candidate's flags that could name a plugin,
    a file or a program for g++ are refused, and nothing is built for that call."""
    monkeypatch.setenv("MAXCODE_HEADER_CACHE", str(tmp_path))
    assert SAFE_FLAG.fullmatch(flag) is None
    source = f'load_inline("x", "", extra_cflags=["-O3", {flag!r}])\n'
    assert include_folder(source) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "flag", ["-O3", "-Ofast", "-march=native", "-mavx2", "-mprefer-vector-width=256",
             "-fopenmp", "-fno-math-errno", "-ffast-math", "-DNDEBUG", "-DTILE=32",
             "-std=c++17", "-Wall", "-Wno-unused-variable", "-g", "-funroll-loops"],
)  # fmt: skip
def test_the_flags_models_use_may_have_a_header(flag: str) -> None:
    assert SAFE_FLAG.fullmatch(flag) is not None


def test_turned_off_or_without_load_inline_nothing_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAXCODE_HEADER_CACHE", "0")
    assert include_folder(CANDIDATE) is None
    monkeypatch.setenv("MAXCODE_HEADER_CACHE", str(tmp_path))
    assert include_folder("class ModelNew:\n    pass\n") is None
    assert list(tmp_path.iterdir()) == []


FAKE_COMPILER = """#!/bin/sh
case "$*" in
  *-dumpfullversion*|*-dumpversion*) echo 12.2.0; exit 0;;
  *" -c "*) printf '%s\\n' "$@" > "$RECORD"; exit 1;;
esac
exec g++ "$@"
"""


def torch_compile_flags(tmp_path: Path, extra: list[str]) -> list[str]:
    """The options torch's ``load_inline`` gives g++ for an extension's C++ source, read by a
    compiler that records them and fails: a real ``load_inline``, nothing compiled."""
    fake = tmp_path / "bin" / "g++"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_COMPILER)
    fake.chmod(0o755)
    record = tmp_path / "argv"
    script = (
        "from torch.utils.cpp_extension import load_inline\n"
        f"load_inline('probe', 'int f() {{ return 1; }}', extra_cflags={extra!r})\n"
    )
    environment = {
        **os.environ,
        "CXX": str(fake),
        "RECORD": str(record),
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
    }
    subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, timeout=120
    )
    argv = record.read_text().split("\n")[:-1]
    # What is the build's own, not the header's: its dependency file, its source and object,
    # and its extension's name.
    dropped = {"-MMD", "-MF", "-c", "-o"}
    kept, skip = [], False
    for argument in argv:
        if skip:
            skip = False
            continue
        if argument in {"-MF", "-o"}:
            skip = True
        if argument in dropped or argument.startswith("-DTORCH_EXTENSION_NAME="):
            continue
        if argument.endswith(("main.cpp", "main.o")):
            continue
        kept.append(argument)
    return kept


def test_the_header_is_built_with_the_options_torch_gives_an_extensions_build(
    tmp_path: Path,
) -> None:
    """If torch's options and the header's differ, g++ reads the real header every time and
    the cache is only a cost: the two are compared as torch runs them."""
    extra = ["-O3", "-march=native"]
    cache = HeaderCache(shutil.which("g++") or "g++")
    assert torch_compile_flags(tmp_path, extra) == cache.flags(tuple(extra))


@pytest.mark.slow
def test_g_plus_plus_uses_the_header_in_a_build_as_torch_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header built for a candidate's flags (about a minute, 0.8 GB), then g++ run with the
    options torch gives that candidate's build and the folder on ``CPATH``: it says it read
    the precompiled header (``-H``: ``!`` and its path), also when the source includes
    ``torch/extension.h`` a second time; with other flags it reads torch's own header."""
    monkeypatch.setenv("MAXCODE_HEADER_CACHE", str(tmp_path / "headers"))
    source = 'load_inline("x", "", extra_cflags=["-O1"])\n'
    folder = include_folder(source)
    assert folder is not None
    variants = list((folder / "torch" / "extension.h.gch").iterdir())
    assert len(variants) == 1
    (tmp_path / "main.cpp").write_text(
        "#include <torch/extension.h>\n\n#include <torch/extension.h>\n"
        "int f(at::Tensor x) { return x.dim(); }\n"
    )

    def compile_with(extra: list[str]) -> str:
        options = torch_compile_flags(tmp_path / f"probe{len(extra)}", extra)
        for _ in range(2):  # g++ 12 once crashed here (an internal compiler error), as the
            # worker's ``header_fallback`` allows for: once more, then it must build.
            done = subprocess.run(
                ["g++", "-H", *options, "-c", "main.cpp", "-o", "main.o"],
                cwd=tmp_path,
                env={**os.environ, "CPATH": str(folder)},
                capture_output=True,
                text=True,
                timeout=300,
            )
            if "internal compiler error" not in done.stderr:
                break
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stderr

    used = compile_with(["-O1"])
    assert f"! {variants[0]}" in used
    real = str(Path(HeaderCache(shutil.which("g++") or "g++").includes[0]) / "torch")
    assert f"{real}/extension.h" not in used
    other = compile_with(["-O2", "-DOTHER=1"])
    assert "! " not in other and f"{real}/extension.h" in other
    # Another candidate with the same flags builds nothing more.
    assert include_folder(source) == folder
    assert list((folder / "torch" / "extension.h.gch").iterdir()) == variants


PROBE_MODULE = r"""
#include <maxcode_probe.h>
#include <Python.h>
static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "probe_ext", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit_probe_ext(void) { return PyModule_Create(&probe); }
"""

FALLBACK_SCRIPT = """
import os, sys
from maxcode.kinds.kernelbench.worker.extensions import header_fallback
header_fallback()
from torch.utils.cpp_extension import load_inline
# The header's own folder after CPATH's, as torch's are (-isystem).
module = load_inline("probe_ext", sys.argv[1], no_implicit_headers=True,
                     extra_cflags=["-isystem", sys.argv[2]])
print(module.__name__, "CPATH" in os.environ)
"""


def test_a_build_that_a_damaged_precompiled_header_fails_builds_again_without_it(
    tmp_path: Path,
) -> None:
    """A real ``load_inline`` in a worker whose ``CPATH`` holds a damaged precompiled header
    (cut short) for a header its source includes: g++ fails on it, and the build succeeds
    without the cache (``worker.extensions.header_fallback``). Without the fallback it fails."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "maxcode_probe.h").write_text("#define MAXCODE_PROBE 1\n")
    cache = tmp_path / "cache"
    (cache / "maxcode_probe.h.gch").mkdir(parents=True)
    # Made with the options torch gives the build, so that g++ takes it up, then cut short.
    options = torch_compile_flags(tmp_path / "probe", ["-isystem", str(real)])
    header = ["g++", "-x", "c++-header", str(real / "maxcode_probe.h"), "-o", "whole.gch"]
    subprocess.run([*header, *options], cwd=tmp_path, capture_output=True, check=True)
    whole = (tmp_path / "whole.gch").read_bytes()
    (cache / "maxcode_probe.h.gch" / "a.gch").write_bytes(whole[:3000])
    environment = {
        **os.environ,
        "CPATH": str(cache),
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
    }
    script = FALLBACK_SCRIPT
    done = subprocess.run(
        [sys.executable, "-c", script, PROBE_MODULE, str(real)],
        env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["probe_ext", "False"]
    # The same build without the fallback: g++ stops at the damaged header.
    environment["TORCH_EXTENSIONS_DIR"] = str(tmp_path / "again")
    unguarded = script.replace("header_fallback()", "")
    failed = subprocess.run(
        [sys.executable, "-c", unguarded, PROBE_MODULE, str(real)],
        env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert failed.returncode != 0 and "precompiled header" in failed.stderr
