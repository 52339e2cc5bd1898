"""A store that degrades by the row: a damaged row marks its run and leaves the others readable,
a damaged page is one clear line (exit 2), a finished run stays finished, a read-only store can
be listed and reported, and run and bench ids match exactly or by a unique prefix."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from maxcode.store import RunStore
from tests.helpers import run_maxcode, run_optimize, write_task


def _finished_runs(tmp_path: Path, count: int = 2) -> tuple[Path, list[str]]:
    """A store with ``count`` finished runs of the offline proposer (real evaluations)."""
    task = write_task(tmp_path / "task")
    store = tmp_path / "runs.db"
    runs = []
    for _ in range(count):
        done = run_optimize(
            str(task), "--model", "rules", "--depth", "1", "--candidates", "1",
            "--store", str(store), "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout)["run_id"])
    return store, runs


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _status(store: Path, run_id: str) -> str:
    with sqlite3.connect(store) as db:
        return str(db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])


def test_a_damaged_row_marks_its_run_and_leaves_the_others_readable(tmp_path: Path) -> None:
    store, (damaged, sound) = _finished_runs(tmp_path)
    with sqlite3.connect(store) as db:
        db.execute(
            "UPDATE evaluations SET feedback_json = '{\"compiled\": tr' WHERE run_id = ?",
            (damaged,),
        )

    listed = run_maxcode("runs", "--store", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["run_id"]: row for row in json.loads(listed.stdout)["runs"]}
    assert rows[damaged]["status"] == "damaged"
    assert f"run {damaged}: a row of evaluations cannot be read" in rows[damaged]["message"]
    assert rows[sound]["status"] == "done" and rows[sound]["verified"]

    table = run_maxcode("runs", "--store", str(store))
    assert table.returncode == 0, table.stderr
    assert _one_line(table).startswith(f"damaged: run {damaged}: a row of evaluations")

    good = run_maxcode("report", sound, "--store", str(store), "-o", str(tmp_path / "a.html"))
    assert good.returncode == 0, good.stderr
    bad = run_maxcode("report", damaged, "--store", str(store), "-o", str(tmp_path / "b.html"))
    assert bad.returncode == 2
    assert "cannot be read" in _one_line(bad)

    # Resuming the finished run meets the damaged row: it must not be rewritten as failed.
    resumed = run_optimize("--resume", damaged, "--store", str(store), "--json")
    assert resumed.returncode == 2, resumed.stderr
    assert "Traceback" not in resumed.stderr and "internal error" not in resumed.stderr
    assert "a row of evaluations cannot be read" in resumed.stderr.strip().splitlines()[-1]
    assert _status(store, damaged) == "done"
    assert _status(store, sound) == "done"


def test_a_damaged_page_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    store, _ = _finished_runs(tmp_path, 1)
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
    size = store.stat().st_size
    with store.open("r+b") as file:  # every page after the first (the schema's) overwritten
        file.seek(page_size)
        file.write(b"\xa5" * (size - page_size))
    listed = run_maxcode("runs", "--store", str(store), "--json")
    assert listed.returncode == 2
    assert "run store" in _one_line(listed)
    assert listed.stdout == ""


def _read_only(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``maxcode ARGS`` with ``folder`` read-only: a read-only bind mount for root (who may
    write any file), the folder's and files' modes otherwise."""
    command = [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", *args]
    if os.geteuid() != 0:
        for path in [folder, *folder.iterdir()]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            return subprocess.run(command, capture_output=True, text=True, check=False)
        finally:
            for path in [folder, *folder.iterdir()]:
                path.chmod(0o755 if path.is_dir() else 0o644)
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare cannot make a read-only folder")
    script = (
        f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    )
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", *command],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_read_only_store_is_listed_and_reported(tmp_path: Path) -> None:
    store, (run_id,) = _finished_runs(tmp_path, 1)
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    shutil.move(store, shelf / "runs.db")
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{store}{suffix}").exists() or Path(f"{store}{suffix}").unlink() is None
    store = shelf / "runs.db"
    before = store.read_bytes()

    listed = _read_only(shelf, "runs", "--store", str(store), "--json")
    if "mount" in listed.stderr and listed.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {listed.stderr.strip()}")
    assert listed.returncode == 0, listed.stderr
    assert [row["run_id"] for row in json.loads(listed.stdout)["runs"]] == [run_id]
    page = tmp_path / "report.html"
    reported = _read_only(shelf, "report", run_id, "--store", str(store), "-o", str(page))
    assert reported.returncode == 0, reported.stderr
    assert run_id in page.read_text()
    resumed = _read_only(shelf, "optimize", "--resume", run_id, "--store", str(store))
    assert resumed.returncode == 2
    assert "Traceback" not in resumed.stderr
    assert "is read-only: no run can be driven" in resumed.stderr.strip().splitlines()[-1]
    assert store.read_bytes() == before
    assert sorted(path.name for path in shelf.iterdir()) == ["runs.db"]


def test_run_and_bench_ids_match_exactly_or_by_a_unique_prefix(tmp_path: Path) -> None:
    store_path, (first, second) = _finished_runs(tmp_path)
    store = RunStore(store_path)
    assert store.get_run("_") is None
    assert store.get_run("%") is None
    assert store.get_run("_" + first[1:]) is None
    assert store.get_run("") is None
    assert store.get_run(first) is not None and store.get_run(first[:8]) is not None
    assert store.get_bench("_") is None and store.get_bench("%") is None
    store.close()
    reported = run_maxcode(
        "report", "_", "--store", str(store_path), "-o", str(tmp_path / "x.html")
    )
    assert reported.returncode == 2
    assert "no run '_'" in _one_line(reported)
    assert not (tmp_path / "x.html").exists()
    assert second != first
