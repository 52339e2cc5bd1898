"""Errors that name the real cause: a full temporary folder or ``MAXCODE_HOME`` is said as such
(never as a sandbox that does not start, never with advice to weaken it), and a setting a kind
ignores (``--scale`` on a C++ task) is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_maxcode, write_task

MAXCODE = [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()"]


def _on_a_full_disk(
    folder: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """``maxcode ARGS`` with ``folder`` a small tmpfs filled to the last byte (a mount
    namespace of its own; needs root)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a full disk is made with a tmpfs in a mount namespace: needs root")
    folder.mkdir(exist_ok=True)
    script = (
        f'mount -t tmpfs -o size=64k,mode=1777 tmpfs "{folder}" || exit 97;'
        f' mkdir -p "{folder}/home"; dd if=/dev/zero of="{folder}/fill" bs=4k 2>/dev/null;'
        ' exec "$@"'
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", *MAXCODE, *args],
        capture_output=True, text=True, check=False, env={**os.environ, **env}, timeout=300,
    )  # fmt: skip
    if done.returncode == 97:
        pytest.skip(f"no tmpfs mount here: {done.stderr.strip()}")
    return done


def test_a_full_temporary_folder_is_said_and_no_weaker_sandbox_suggested(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    full = tmp_path / "full"
    done = _on_a_full_disk(
        full, {"TMPDIR": str(full)}, "eval", str(task), str(task / "reference.cpp")
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"the temporary folder {full} cannot be written: No space left on device" in line
    assert "unsafe" not in line and "bubblewrap" not in line

    doctor = _on_a_full_disk(full, {"TMPDIR": str(full)}, "doctor")
    assert "No space left on device" in doctor.stdout, doctor.stdout
    assert "does not start" not in doctor.stdout and "unsafe-isolation" not in doctor.stdout


def test_a_full_maxcode_home_is_said(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    full = tmp_path / "full"
    home = {"MAXCODE_HOME": str(full / "home")}
    doctor = _on_a_full_disk(full, home, "doctor")
    assert f"MAXCODE_HOME {full / 'home'} cannot be written: No space left" in doctor.stdout
    assert "does not start" not in doctor.stdout and "unsafe-isolation" not in doctor.stdout

    done = _on_a_full_disk(full, home, "optimize", str(task), "--model", "rules", "--depth", "1")
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "run store" in last and "full" in last, done.stderr
    assert "Traceback" not in done.stderr and "unsafe" not in done.stderr


def test_scale_on_a_cpp_task_is_refused_in_one_line(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task")
    done = run_maxcode("eval", str(task), str(task / "reference.cpp"), "--scale", "0.5")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "error: sum: --scale is for KernelBench tasks (it scales a problem's sizes)"
    )


FILLS_DURING_A_SEARCH = """
set -u
F=$1; shift
mount -t tmpfs -o size=4m,mode=1777 tmpfs "$F" || exit 97
"$@" runs --store "$F/runs.db" > /dev/null
dd if=/dev/zero of="$F/fill" bs=4k 2>/dev/null
truncate -s -300k "$F/fill"
"$@" optimize "$TASK" --model rules --depth 6 --candidates 2 --store "$F/runs.db" --json \
    > "$OUT/first.out" 2> "$OUT/first.err"
echo $? > "$OUT/first.rc"
"$@" runs --store "$F/runs.db" --json > "$OUT/stopped.json"
rm "$F/fill"
RUN=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0]['run_id'])" \
    "$OUT/stopped.json")
"$@" optimize --resume "$RUN" --store "$F/runs.db" --json > "$OUT/resumed.out" 2> "$OUT/resumed.err"
echo $? > "$OUT/resumed.rc"
"""


def test_a_disk_that_fills_during_a_search_stops_it_and_it_resumes_once_there_is_space(
    tmp_path: Path,
) -> None:
    """The store's disk fills after a few steps: the run stops with one line naming the store
    and the full disk (exit 2), what it recorded stays, it is listed as stopped, and once
    space is freed ``--resume`` finishes it without asking for any step again."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a full disk is made with a tmpfs in a mount namespace: needs root")
    task = write_task(tmp_path / "task")
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", FILLS_DURING_A_SEARCH, "sh", str(disk), *MAXCODE],
        capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "TASK": str(task), "OUT": str(out)},
    )  # fmt: skip
    if done.returncode == 97:
        pytest.skip(f"no tmpfs mount here: {done.stderr.strip()}")
    first_err = (out / "first.err").read_text()
    assert (out / "first.rc").read_text().strip() == "2", first_err
    last = first_err.strip().splitlines()[-1]
    assert last == f"error: run store {disk}/runs.db: database or disk is full", first_err
    assert "Traceback" not in first_err
    (stopped,) = json.loads((out / "stopped.json").read_text())["runs"]
    assert stopped["status"] == "stopped"
    assert 1 <= stopped["steps"] < 6 and stopped["evaluations"] >= 1
    resumed_err = (out / "resumed.err").read_text()
    assert (out / "resumed.rc").read_text().strip() == "0", resumed_err
    resumed = json.loads((out / "resumed.out").read_text())
    assert resumed["status"] == "done" and resumed["evaluations"] >= stopped["evaluations"]
    # One proposal per step in all: the steps done before the disk filled were replayed.
    assert resumed["llm_calls"] == 6
