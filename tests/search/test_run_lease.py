"""One driver per run: a second process driving a live run is refused in one line; a run whose
driver was killed shows as stopped (interrupted), its scratch folders go, and it resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from maxcode.harness.sandbox import scratch_base
from tests.helpers import run_maxcode, write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step
from tests.search.test_resume import VARIANTS, _command, _count, _env, responder


def _slow_responder(body: dict[str, Any]) -> Step:
    time.sleep(0.3)  # the first driver stays alive while the second one tries
    return responder(body)


def _resume(run_id: str, store: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "optimize",
            "--resume", run_id, "--store", str(store), "--base-url", url, "--json",
        ],
        capture_output=True, text=True, timeout=600, env=_env(), check=False,
    )  # fmt: skip


def test_a_second_driver_is_refused_and_a_killed_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the table's status column whole
    task = write_task(
        tmp_path / "task", reference=VARIANTS[0], tests=[("1 2\n", "3\n"), ("40 2\n", "42\n")]
    )
    server = FakeLLMServer()
    server.responder = _slow_responder
    store = tmp_path / "runs.db"
    try:
        first = subprocess.Popen(
            _command(task, store, server.url),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while _count(store) < 1 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.poll() is None, "the run ended before a second driver could try"
        with sqlite3.connect(store) as db:
            (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()

        second = _resume(run_id, store, server.url)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0] == f"resuming run {run_id}", second.stderr
        assert f"is being driven by process {first.pid} on " in lines[1]
        assert "Traceback" not in second.stderr and "internal error" not in second.stderr
        assert first.poll() is None
        with sqlite3.connect(store) as db:
            assert db.execute("SELECT status FROM runs").fetchone()[0] == "running"

        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        listed = run_maxcode("runs", "--store", str(store), "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = json.loads(listed.stdout)["runs"]
        assert row["status"] == "stopped"
        assert row["message"].startswith(f"interrupted: its driver (process {first.pid} on ")
        table = run_maxcode("runs", "--store", str(store))
        assert "stopped (interrupted)" in " ".join(table.stdout.split()), table.stdout

        # What the killed driver's sandboxes left behind (named after its process id).
        left = scratch_base() / f"maxcode-run-p{first.pid}-leftover"
        left.mkdir()
        (left / "a.out").write_text("x")
        resumed = _resume(run_id, store, server.url)
    finally:
        server.close()
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "done"
    assert not left.exists()
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM run_leases").fetchone()[0] == 0


def test_doctor_clean_removes_only_what_dead_processes_left(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = time.time() - 3600
    left = scratch_base() / f"maxcode-batch-p{gone.pid}-abc"
    live = scratch_base() / f"maxcode-batch-p{os.getpid()}-abc"
    fresh = scratch_base() / f"maxcode-bin-p{gone.pid}-new"
    for folder in (left, live, fresh):
        folder.mkdir()
        (folder / "file").write_text("x")
    for folder in (left, live):
        os.utime(folder, (old, old))
    try:
        done = run_maxcode("doctor", "--clean", "--json")
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)
        assert "scratch folder(s) of processes that are gone" in done.stderr
        assert not left.exists()
        assert live.exists()  # its process runs
        assert fresh.exists()  # touched under a minute ago: maybe still in use
    finally:
        for folder in (live, fresh):
            shutil.rmtree(folder, ignore_errors=True)
