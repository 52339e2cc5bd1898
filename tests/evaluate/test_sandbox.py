"""The sandbox: limits that hold even for root, nothing left behind, nothing written outside."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from maxcode.harness.sandbox import (
    RUNS_PER_START,
    Limits,
    Run,
    Sandbox,
    SandboxResult,
    detect_isolation,
    make_scratch,
)
from tests.helpers import processes_with

LEVELS = ["bwrap", "unshare", "rlimits"]


def _available(level: str) -> bool:
    order = ["bwrap", "unshare", "rlimits"]
    return order.index(detect_isolation()) <= order.index(level)


@pytest.fixture(params=LEVELS)
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    if not _available(request.param):
        pytest.skip(f"{request.param} does not work on this machine")
    return Sandbox(request.param, unsafe_ok=True)


def _sh(sandbox: Sandbox, script: str, tmp_path: Path, **limits: Any) -> SandboxResult:
    scratch = make_scratch()
    (tmp_path / "scratch").symlink_to(scratch)
    return sandbox.run(["sh", "-c", script], scratch=scratch, limits=Limits(**limits))


def test_bwrap_is_used_when_installed() -> None:
    if subprocess.run(["which", "bwrap"], capture_output=True).returncode != 0:
        pytest.skip("bubblewrap is not installed")
    assert detect_isolation() == "bwrap"


def test_runs_and_reports_isolation(sandbox: Sandbox, tmp_path: Path) -> None:
    result = _sh(sandbox, "echo hello; echo oops >&2; exit 3", tmp_path)
    assert result.exit_code == 3
    assert result.stdout == b"hello\n"
    assert "oops" in result.stderr
    assert result.isolation == sandbox.isolation


def test_environment_is_scrubbed(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    result = _sh(sandbox, "env", tmp_path)
    assert b"sk-secret" not in result.stdout
    assert b"PATH=" in result.stdout


def test_wall_limit_kills_an_endless_loop(sandbox: Sandbox, tmp_path: Path) -> None:
    result = _sh(sandbox, "while :; do :; done", tmp_path, wall_s=0.5)
    assert result.limit_hit == "wall"


def test_cpu_limit_holds(sandbox: Sandbox, tmp_path: Path) -> None:
    result = _sh(sandbox, "exec python3 -c 'while True: pass'", tmp_path, wall_s=10, cpu_s=1)
    assert result.limit_hit == "cpu"


def test_memory_limit_holds_for_root_too(sandbox: Sandbox, tmp_path: Path) -> None:
    script = "exec python3 -c 'x = bytearray(600 << 20); print(len(x))'"
    result = _sh(sandbox, script, tmp_path, memory_bytes=300 << 20)
    assert result.exit_code != 0
    assert result.limit_hit == "memory"


def test_output_is_capped(sandbox: Sandbox, tmp_path: Path) -> None:
    result = _sh(sandbox, "exec yes hello", tmp_path, file_size_bytes=1 << 20)
    assert result.limit_hit == "output"
    assert len(result.stdout) <= 1 << 20


def test_children_that_outlive_the_program_are_killed(sandbox: Sandbox, tmp_path: Path) -> None:
    marker = f"sleep {os.getpid() % 1000 + 1000}"
    result = _sh(sandbox, f"for i in $(seq 20); do {marker} & done; echo started", tmp_path)
    assert result.stdout == b"started\n"
    assert result.stragglers_killed
    assert not processes_with(marker)


def test_process_count_is_limited_for_root_too(sandbox: Sandbox, tmp_path: Path) -> None:
    # A marker no other process on the machine has ("sleep 5" also matched a "sleep 540").
    marker = f"sleep 5.{os.getpid() % 1000:03d}"
    script = f"n=0; for i in $(seq 100); do {marker} & n=$((n+1)); done 2>/dev/null; wait; echo $n"
    result = _sh(sandbox, script, tmp_path, wall_s=5)
    assert result.exit_code != 0 or result.limit_hit
    assert b"100" not in result.stdout
    assert not processes_with(marker)


def test_scratch_is_the_only_writable_place(tmp_path: Path) -> None:
    if not _available("bwrap"):
        pytest.skip("only bwrap gives a private file system")
    outside = tmp_path / "outside.txt"
    home_file = Path.home() / f".maxcode-sandbox-probe-{os.getpid()}"
    script = f"echo x > {outside}; echo x > {home_file}; echo x > /tmp/probe; echo x > ok.txt"
    script += "; cat ok.txt"
    result = _sh(Sandbox("bwrap"), script, tmp_path)
    assert result.stdout == b"x\n"
    assert not outside.exists()
    assert not home_file.exists()
    assert (tmp_path / "scratch" / "ok.txt").exists()


def test_each_bwrap_run_has_a_writable_tmp_of_its_own(tmp_path: Path) -> None:
    # Published kernels write their sources to /tmp and build them there.
    if not _available("bwrap"):
        pytest.skip("only bwrap gives a private file system")
    marker = f"maxcode-probe-{os.getpid()}"
    script = f"cat /tmp/{marker} 2>/dev/null; echo mine > /tmp/{marker} && cat /tmp/{marker}"
    inputs = make_scratch()
    first, second = Sandbox("bwrap").run_batch(["sh", "-c", script], [Run(), Run()])
    shutil.rmtree(inputs, ignore_errors=True)
    assert first.stdout == b"mine\n" and second.stdout == b"mine\n"
    assert not Path("/tmp", marker).exists()


def test_files_outside_are_invisible_with_bwrap(tmp_path: Path) -> None:
    if not _available("bwrap"):
        pytest.skip("only bwrap hides the file system")
    secret = tmp_path / "expected-output.txt"
    secret.write_text("the answer")
    result = _sh(Sandbox("bwrap"), f"cat {secret}", tmp_path)
    assert result.exit_code != 0
    assert b"the answer" not in result.stdout


def test_bwrap_shows_no_sysfs_to_a_cpu_run(tmp_path: Path) -> None:
    if not _available("bwrap"):
        pytest.skip("only bwrap hides the file system")
    if not Path("/sys/class").is_dir():
        pytest.skip("this system has no sysfs")
    result = _sh(Sandbox("bwrap"), "ls /sys/class /sys/kernel/mm && echo LISTED", tmp_path)
    assert b"LISTED" not in result.stdout
    assert result.exit_code != 0


def _listener() -> tuple[socket.socket, list[socket.socket]]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []

    def accept() -> None:
        for _ in range(20):
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return server, accepted


@pytest.mark.parametrize("level", ["bwrap", "unshare"])
def test_no_network_connection_reaches_the_host(tmp_path: Path, level: str) -> None:
    if not _available(level):
        pytest.skip(f"{level} does not work here")
    server, accepted = _listener()
    port = server.getsockname()[1]
    script = (
        'python3 -c "import socket; s = socket.socket(); s.settimeout(2); '
        f"s.connect(('127.0.0.1', {port})); print('connected')\""
    )
    result = _sh(Sandbox(level, unsafe_ok=True), script, tmp_path)  # type: ignore[arg-type]
    server.close()
    assert b"connected" not in result.stdout
    assert result.exit_code != 0
    assert accepted == []


def test_a_run_that_ends_by_itself_reports_no_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    # How long the start-up and the program's own run take, apart, is
    # benchmarks/run_overhead.py's to say, not a test's.
    result = _sh(sandbox, "sleep 0.2", tmp_path)
    assert result.exit_code == 0 and result.limit_hit is None and result.signal is None


def test_runs_of_a_batch_cannot_leave_state_for_each_other(sandbox: Sandbox) -> None:
    # Run 0 tries to stash a file everywhere it can; run 1 looks for it.
    stash = f"stash-{os.getpid()}-{sandbox.isolation}"
    script = (
        'if [ "$(cat)" = write ]; then '
        "for d in . .. /tmp /dev/shm $HOME; do echo stash > $d/STASH 2>/dev/null; done; "
        "ls .. > /dev/null 2>&1 && echo listed-siblings; "
        "else for d in .. /tmp /dev/shm $HOME; do cat $d/STASH 2>/dev/null; done; "
        "ls .. 2>/dev/null | head -3; fi; pwd"
    ).replace("STASH", stash)
    inputs = make_scratch()
    (inputs / "write").write_text("write")
    (inputs / "read").write_text("read")
    runs = [Run(stdin=inputs / "write"), Run(stdin=inputs / "read")]
    try:
        first, second = sandbox.run_batch(["sh", "-c", script], runs)
    finally:
        leaked = [Path(folder, stash) for folder in ("/tmp", "/dev/shm")]
        leaked_exist = [path.exists() for path in leaked]
        for path in leaked:
            path.unlink(missing_ok=True)
    assert b"listed-siblings" not in first.stdout
    assert first.stdout.splitlines()[-1] != second.stdout.splitlines()[-1]
    if sandbox.isolation == "bwrap":
        assert b"stash" not in second.stdout
        assert not any(leaked_exist)
    else:
        # The weaker levels share the host's /tmp and /dev/shm: only the private folders hold.
        assert second.stdout.count(b"stash") <= 2


def test_each_run_of_a_batch_gets_its_own_limits_and_report(sandbox: Sandbox) -> None:
    inputs = make_scratch()
    for name in ("fast", "loop", "fail"):
        (inputs / name).write_text(name)
    script = 'case "$(cat)" in fast) echo ok;; loop) while :; do :; done;; fail) exit 4;; esac'
    runs = [Run(stdin=inputs / name) for name in ("fast", "fail", "loop", "fast")]
    results = sandbox.run_batch(["sh", "-c", script], runs, limits=Limits(wall_s=0.5))
    assert [result.stdout for result in results] == [b"ok\n", b"", b"", b""]
    assert [result.limit_hit for result in results] == [None, None, "wall", "wall"]
    assert results[1].exit_code == 4
    # The first timeout ends the batch: the run after it never ran (no report, no time).
    assert results[2].wall_s >= 0.5 and results[3].wall_s == 0.0
    assert results[3].exit_code is None and results[3].cpu_s == 0.0


def test_a_batch_longer_than_one_start_holds_runs_in_full() -> None:
    """bwrap takes at most 9,000 arguments and the init seven a run: a batch of more runs than
    one start holds is run in several, in order, every run reported (at 1,488 runs in one
    start, every run came back killed, wall 0.0). The level whose limit it is."""
    if not _available("bwrap"):
        pytest.skip("bwrap does not work on this machine")
    sandbox = Sandbox("bwrap")
    inputs = make_scratch()
    count = RUNS_PER_START + RUNS_PER_START // 2
    for number in range(count):
        (inputs / str(number)).write_text(str(number))
    runs = [Run(stdin=inputs / str(number)) for number in range(count)]
    results = sandbox.run_batch(["cat"], runs, limits=Limits(wall_s=5))
    assert [result.limit_hit for result in results] == [None] * count
    assert [result.stdout for result in results] == [str(n).encode() for n in range(count)]


def test_a_runs_cpu_time_and_wall_time_start_at_one_instant(sandbox: Sandbox) -> None:
    """A run's CPU time is counted from where its wall time starts, just before the program
    runs: its isolation (namespaces, a mount per folder: kernel time before the program runs)
    was counted in its CPU time but not its wall time, and an identical C++ candidate of
    ``prime_sieve`` (a 1 ms test) was once void ``parallel:`` with 0.006 CPU-seconds in
    0.001 s. Pinned to one CPU, a run's CPU time then exceeds its wall time by no more than
    the tail of its exit (the init may stamp the end before the exited process last runs):
    microseconds (the isolation was 70 us to 1.8 ms a run here)."""
    folders = [make_scratch() for _ in range(40)]
    runs = [Run() for _ in range(30)]
    cpu = sorted(os.sched_getaffinity(0))[-1]
    results = sandbox.run_batch(["true"], runs, readonly=folders, cpu=cpu)
    assert [result.exit_code for result in results] == [0] * len(runs)
    excess = sorted(result.cpu_s - result.wall_s for result in results)
    assert excess[len(excess) // 2] < 50e-6, excess


def test_no_run_may_move_itself_to_another_cpu(sandbox: Sandbox, tmp_path: Path) -> None:
    """Where a run's threads run is the parent's choice: a run pinned to one CPU (and one not
    pinned) cannot change any thread's affinity, by any ABI the kernel serves; it reads it."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: nowhere else to go")
    cpus = sorted(os.sched_getaffinity(0))
    script = (
        "import os, threading\n"
        "refused = []\n"
        "def move():\n"
        "    try:\n"
        f"        os.sched_setaffinity(0, {{{cpus[0]}}})\n"
        "    except PermissionError:\n"
        "        refused.append(1)\n"
        "move()\n"
        "helper = threading.Thread(target=move); helper.start(); helper.join()\n"
        "print(len(refused), sorted(os.sched_getaffinity(0)))\n"
    )
    scratch = make_scratch()
    (tmp_path / "scratch").symlink_to(scratch)
    for pin, allowed in ((cpus[-1], [cpus[-1]]), (None, cpus)):
        result = sandbox.run(["python3", "-c", script], scratch=scratch, cpu=pin)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.decode().strip().split(maxsplit=1) == ["2", str(allowed)]
