"""``maxcode doctor``: what this machine offers, never a traceback, always exit 0."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.helpers import run_maxcode


def test_doctor_json_is_one_object_covering_isolation_tools_and_task_kinds() -> None:
    done = run_maxcode("doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["isolation"]["level"] in ("bwrap", "unshare", "rlimits")
    assert report["isolation"]["reasons"]
    names = {tool["name"] for tool in report["tools"]}
    assert {"g++", "valgrind", "nvcc", "ncu", "torch", "gpu", "triton"} <= names
    kinds = {kind["kind"]: kind for kind in report["task_kinds"]}
    assert set(kinds) == {
        "cpp wall", "cpp instructions", "kernelbench cpu", "kernelbench cuda", "project wall",
        "project instructions",
    }  # fmt: skip
    for kind in kinds.values():
        assert kind["ready"] == (not kind["missing"])
        assert bool(kind["install"]) == bool(kind["missing"])


def test_doctor_without_tools_says_what_to_install(tmp_path: Path) -> None:
    import subprocess

    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": str(empty)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    tools = {tool["name"]: tool for tool in report["tools"]}
    assert tools["g++"]["found"] is False and tools["g++"]["install"] == "apt-get install g++"
    assert tools["valgrind"]["install"] == "apt-get install valgrind"
    assert report["isolation"]["level"] == "rlimits" and report["isolation"]["safe"] is False
    assert "bwrap not found" in report["isolation"]["reasons"]
    assert "apt-get install bubblewrap" in report["isolation"]["install"]
    kinds = {kind["kind"]: kind for kind in report["task_kinds"]}
    cpp = kinds["cpp instructions"]
    assert not cpp["ready"] and {"g++", "valgrind", "isolation"} <= set(cpp["missing"])
    assert "apt-get install valgrind" in cpp["install"]
    assert "apt-get install bubblewrap" in " ".join(cpp["install"])

    text = subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": str(empty)},
        check=False,
    )
    assert text.returncode == 0 and "Traceback" not in text.stderr
    assert "auto picks rlimits" in text.stdout and "apt-get install g++" in text.stdout
