"""The one way maxcode runs a compiler or a candidate: sandboxed, bounded, killed as a tree.

Isolation levels, strongest first (``auto`` picks the first that works here):

- ``bwrap``: bubblewrap. New user, pid, network, ipc and uts namespaces; the file system is
  only the system folders (read-only), a private ``/tmp``, the scratch folder (writable) and
  the paths the caller lists (read-only). The task's expected outputs are not visible.
- ``unshare``: util-linux ``unshare`` gives new pid and network namespaces; the file system is
  the host's, protected only by file permissions.
- ``rlimits``: resource limits and a process group only. No network isolation: results say so.

At every level the program gets resource limits (address space, CPU seconds, file size,
process count), a scrubbed environment, its own session, a fresh scratch folder as working
directory and home, stdin from a file and stdout/stderr into parent-private files (capped by
the file-size limit). When maxcode runs as root, the program runs as an unprivileged uid of
its own (one per concurrent run): root ignores the process-count limit and file permissions,
an ordinary uid does not, and a uid that nothing else uses lets the parent kill every process
the run left behind, even ones that left the process group.

Inside the sandbox the first process is ``maxcode-init`` (``init.c``, compiled once per
machine): it times the program with a monotonic clock, waits for it, kills and reports what
the program left running, and writes its report to a descriptor the program never sees. Its
timing excludes the sandbox's own start-up, which the parent cannot separate from the
program's. The parent enforces the wall-clock limit (a blocking wait on a pidfd, no polling)
and kills the whole tree when it passes.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.resources
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

Isolation = Literal["bwrap", "unshare", "rlimits"]
LimitHit = Literal["wall", "cpu", "memory", "output"]

_UID_BASE = 10_000_000
_UID_SLOTS = 64
_KILL_GRACE_S = 0.2
_STDERR_HEAD = 3072
_STDERR_TAIL = 1024


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use."""

    wall_s: float = 10.0
    """Wall-clock limit; the whole process tree is killed when it passes."""
    cpu_s: float | None = None
    """CPU-seconds limit per process (default: the wall limit plus one second)."""
    memory_bytes: int | None = 2 << 30
    """Address-space limit per process (None: unlimited, e.g. for valgrind's own mappings)."""
    file_size_bytes: int = 64 << 20
    """Largest file the program may write, stdout included."""
    processes: int = 64
    """Most processes the run may have at once (enforced where the run has its own uid)."""


@dataclass
class SandboxResult:
    """What a sandboxed run did."""

    exit_code: int | None
    """Exit status when the program exited; None when a signal ended it."""
    signal: int | None
    """The signal that ended the program, if any."""
    limit_hit: LimitHit | None
    """Which limit ended the run, when one did."""
    wall_s: float
    """The program's wall time, measured by the sandbox's init (sandbox start-up excluded)."""
    cpu_s: float
    """User plus system CPU time of the whole tree."""
    max_rss_kb: int
    """Peak resident memory of the largest process, in KiB."""
    stdout: bytes
    """Everything the program wrote to stdout (at most the file-size limit)."""
    stderr: str
    """stderr, decoded leniently; when long, its first 3 KiB and last 1 KiB."""
    isolation: Isolation
    """The isolation level the run had."""
    stragglers_killed: bool = False
    """Processes outlived the main one and were killed."""
    startup_s: float = 0.0
    """Time the sandbox took around the program (parent's wall time minus the program's)."""

    @property
    def ok(self) -> bool:
        """Exited with status 0 within every limit."""
        return self.exit_code == 0 and self.limit_hit is None and self.signal is None


@dataclass
class _UidPool:
    """Unprivileged uids, one per concurrent run, unique to this process."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    in_use: set[int] = field(default_factory=set)

    def acquire(self) -> int:
        with self.lock:
            for slot in range(_UID_SLOTS):
                if slot not in self.in_use:
                    self.in_use.add(slot)
                    return _UID_BASE + os.getpid() * _UID_SLOTS + slot
        raise RuntimeError(f"more than {_UID_SLOTS} concurrent sandboxed runs in one process")

    def release(self, uid: int) -> None:
        with self.lock:
            self.in_use.discard((uid - _UID_BASE) % _UID_SLOTS)


_uids = _UidPool()


def make_scratch(prefix: str = "maxcode-run-") -> Path:
    """A fresh scratch folder that a sandboxed run's own uid can reach.

    The system temporary folder, unless some folder on its path is closed to other users
    (a private ``TMPDIR``); then ``/tmp``.
    """
    base = Path(tempfile.gettempdir()).resolve()
    if not _world_traversable(base):
        base = Path("/tmp")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def _world_traversable(folder: Path) -> bool:
    return all(os.stat(part).st_mode & 0o001 for part in [folder, *folder.parents])


def _is_root() -> bool:
    return os.geteuid() == 0


def _system_binds() -> list[str]:
    """bwrap arguments exposing the system folders read-only (symlinks kept as symlinks)."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        args += ["--ro-bind-try", etc, etc]
    return args


@cache
def _probe(level: Isolation) -> bool:
    """Whether a trivial program runs at this isolation level on this machine."""
    try:
        scratch = make_scratch("maxcode-probe-")
        try:
            result = Sandbox(level).run(["/usr/bin/true"], scratch=scratch, limits=Limits(5))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return result.ok
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return False


def detect_isolation() -> Isolation:
    """The strongest isolation level that works on this machine."""
    if shutil.which("bwrap") and _probe("bwrap"):
        return "bwrap"
    if shutil.which("unshare") and _probe("unshare"):
        return "unshare"
    return "rlimits"


class Sandbox:
    """Runs commands under one isolation level (``auto``: the strongest available)."""

    def __init__(self, isolation: Isolation | Literal["auto"] = "auto") -> None:
        self.isolation: Isolation = detect_isolation() if isolation == "auto" else isolation
        self.drops_uid = _is_root()

    def run(
        self,
        argv: Sequence[str],
        *,
        scratch: Path,
        stdin: Path | None = None,
        readonly: Sequence[Path] = (),
        limits: Limits | None = None,
        cpu: int | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> SandboxResult:
        """Run ``argv`` with ``scratch`` (from ``make_scratch``, empty or prepared) as its only
        writable place and working directory; ``readonly`` paths are visible read-only;
        ``cpu`` pins the run to one CPU; ``pass_fds`` stay open in the program."""
        limits = limits or Limits()
        scratch = scratch.resolve()
        uid = _uids.acquire() if self.drops_uid else None
        try:
            if uid is not None:
                _chown_tree(scratch, uid)
            with tempfile.TemporaryDirectory(prefix="maxcode-io-") as io_dir:
                return self._run(
                    argv, scratch, stdin, readonly, limits, cpu, env, uid, Path(io_dir), pass_fds
                )
        finally:
            if uid is not None:
                _uids.release(uid)

    def _command(
        self,
        argv: Sequence[str],
        scratch: Path,
        readonly: Sequence[Path],
        environment: dict[str, str],
        uid: int | None,
        status_fd: int,
    ) -> list[str]:
        init = _init_binary()
        reach = "ns" if self.isolation != "rlimits" else "uid" if uid is not None else "group"
        argv = [str(init), str(status_fd), reach, "--", *argv]
        if self.isolation == "bwrap":
            # --as-pid-1 makes our init pid 1. bwrap's own init would be left a zombie for the
            # host's pid 1 to reap, which a container's pid 1 may never do.
            command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1"]
            command += _system_binds()
            command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
            command += ["--ro-bind", str(init.parent), str(init.parent)]
            for path in readonly:
                resolved = str(Path(path).resolve())
                command += ["--ro-bind", resolved, resolved]
            command += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
            command += ["--clearenv"]
            for key, value in environment.items():
                command += ["--setenv", key, value]
            return [*command, "--", *argv]
        if self.isolation == "unshare":
            command = ["unshare", "--pid", "--net", "--fork", "--kill-child", "--mount-proc"]
            if uid is None:
                command.insert(1, "--map-root-user")
                return [*command, "--", *argv]
            # unshare needs root to make the namespaces; the program itself drops to the uid.
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
            return [*command, "--", *drop, *argv]
        return list(argv)

    def _run(
        self,
        argv: Sequence[str],
        scratch: Path,
        stdin: Path | None,
        readonly: Sequence[Path],
        limits: Limits,
        cpu: int | None,
        env: Mapping[str, str] | None,
        uid: int | None,
        io_dir: Path,
        pass_fds: Sequence[int],
    ) -> SandboxResult:
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            **(env or {}),
        }
        status_path = io_dir / "status"
        status_fd = os.open(status_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            command = self._command(argv, scratch, readonly, environment, uid, status_fd)
        except BaseException:
            os.close(status_fd)
            raise
        cpu_seconds = limits.cpu_s if limits.cpu_s is not None else limits.wall_s + 1
        # unshare drops the uid itself, after making its namespaces.
        as_uid = None if self.isolation == "unshare" else uid

        def in_child() -> None:
            # Runs between fork and exec: keep it to system calls.
            def limit(kind: int, value: int) -> None:
                resource.setrlimit(kind, (value, value))

            limit(resource.RLIMIT_CORE, 0)
            limit(resource.RLIMIT_FSIZE, limits.file_size_bytes)
            soft_cpu = max(1, int(cpu_seconds + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, soft_cpu + 1))
            if limits.memory_bytes is not None:
                limit(resource.RLIMIT_AS, limits.memory_bytes)
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
            if uid is not None:
                limit(resource.RLIMIT_NPROC, limits.processes)
            if as_uid is not None:
                os.setgroups([])
                os.setgid(as_uid)
                os.setuid(as_uid)

        stdout_path, stderr_path = io_dir / "stdout", io_dir / "stderr"
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            stdin_file = open(stdin, "rb") if stdin else open(os.devnull, "rb")  # noqa: SIM115
            with stdin_file:
                started = time.perf_counter()
                process = subprocess.Popen(
                    command,
                    stdin=stdin_file,
                    stdout=out,
                    stderr=err,
                    cwd=scratch,
                    env=environment,
                    start_new_session=True,
                    preexec_fn=in_child,
                    close_fds=True,
                    pass_fds=(status_fd, *pass_fds),
                )
                finished, wall = _wait_until(process.pid, started, limits.wall_s)
                if not finished:
                    _kill_group(process.pid)
                _, status, usage = os.wait4(process.pid, 0)
                process.returncode = os.waitstatus_to_exitcode(status)
        os.close(status_fd)
        report = _read_report(status_path)
        stragglers = bool(report.get("stragglers"))
        if uid is not None and self.isolation != "bwrap":
            stragglers = _kill_uid(uid) or stragglers
        return self._result(
            status,
            usage,
            wall,
            finished,
            limits,
            cpu_seconds,
            stdout_path,
            stderr_path,
            stragglers,
            report,
        )

    def _result(
        self,
        status: int,
        usage: resource.struct_rusage,
        wall: float,
        finished: bool,
        limits: Limits,
        cpu_seconds: float,
        stdout_path: Path,
        stderr_path: Path,
        stragglers: bool,
        report: dict[str, int],
    ) -> SandboxResult:
        exit_code: int | None = None
        signal_number: int | None = None
        program_wall = wall
        if "status" in report:
            # The init saw the program itself end: trust its account over the wrapper's.
            status = report["status"]
            program_wall = report["wall_ns"] / 1e9
        if os.WIFSIGNALED(status):
            signal_number = os.WTERMSIG(status)
        else:
            exit_code = os.WEXITSTATUS(status)
            # Without the init's report, the exit status is the wrappers' (bwrap, unshare, the
            # init itself), which report a program killed by signal N as 128 + N.
            if "status" not in report and exit_code > 128 and exit_code - 128 < signal.NSIG:
                signal_number, exit_code = exit_code - 128, None
        stdout = stdout_path.read_bytes()[: limits.file_size_bytes]
        stderr = _head_and_tail(stderr_path)
        cpu_used = usage.ru_utime + usage.ru_stime
        limit_hit: LimitHit | None = None
        if not finished:
            limit_hit = "wall"
        elif signal_number == signal.SIGXFSZ:
            limit_hit = "output"
        elif signal_number == signal.SIGXCPU or (
            signal_number == signal.SIGKILL and cpu_used >= cpu_seconds
        ):
            limit_hit = "cpu"
        elif limits.memory_bytes is not None and _looks_out_of_memory(signal_number, stderr):
            limit_hit = "memory"
        return SandboxResult(
            exit_code=exit_code,
            signal=signal_number,
            limit_hit=limit_hit,
            wall_s=program_wall,
            cpu_s=cpu_used,
            max_rss_kb=usage.ru_maxrss,
            stdout=stdout,
            stderr=stderr,
            isolation=self.isolation,
            stragglers_killed=stragglers,
            startup_s=max(0.0, wall - program_wall),
        )


_REPORT_FIELD = re.compile(r"(\w+)=(-?\d+)")


def _read_report(path: Path) -> dict[str, int]:
    """The init's status line (empty when the init was killed before writing it)."""
    text = path.read_text(errors="replace")
    return {key: int(value) for key, value in _REPORT_FIELD.findall(text)}


@cache
def _init_binary() -> Path:
    """The compiled ``maxcode-init``, copied to a folder every sandbox uid can read."""
    from maxcode.config import cache_dir

    source = importlib.resources.files("maxcode.evaluate").joinpath("init.c").read_text()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("maxcode needs a C compiler (gcc) to build its sandbox init")
    key = hashlib.sha256(f"{compiler}\n{source}".encode()).hexdigest()[:16]
    built = cache_dir("build") / f"init-{key}" / "maxcode-init"
    if not built.is_file():
        built.parent.mkdir(parents=True, exist_ok=True)
        source_path = built.parent / "init.c"
        source_path.write_text(source)
        staging = built.with_suffix(f".{os.getpid()}")
        # Our own trusted source: compiled directly, not through the sandbox that needs it.
        compiled = subprocess.run(
            [compiler, "-O2", "-o", str(staging), str(source_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if compiled.returncode != 0:
            raise RuntimeError(f"cannot build the sandbox init: {compiled.stderr.strip()[:300]}")
        os.replace(staging, built)
    shared = Path(tempfile.mkdtemp(prefix="maxcode-init-"))
    os.chmod(shared, 0o755)
    atexit.register(shutil.rmtree, shared, True)
    target = shared / "maxcode-init"
    shutil.copyfile(built, target)
    os.chmod(target, 0o755)
    return target


def _wait_until(pid: int, started: float, limit_s: float) -> tuple[bool, float]:
    """Block until the process exits or the limit passes; returns (exited, seconds)."""
    deadline_ms = max(1, int(limit_s * 1000))
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return _wait_by_polling(pid, started, limit_s)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        ready = poller.poll(deadline_ms)
        return bool(ready), time.perf_counter() - started
    finally:
        os.close(pidfd)


def _wait_by_polling(pid: int, started: float, limit_s: float) -> tuple[bool, float]:
    """Fallback for kernels without pidfd: wait without reaping, in short steps."""
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = None
        elapsed = time.perf_counter() - started
        if info is not None:
            return True, elapsed
        if elapsed >= limit_s:
            return False, elapsed
        time.sleep(0.0005)


def _kill_group(pid: int) -> None:
    """Terminate the run's process group, then kill it after a short grace period."""
    for sig, pause in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        if pause:
            ended, _ = _wait_until(pid, time.perf_counter(), pause)
            if ended:
                # The leader is gone; other members may remain: kill them without grace.
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return


def _kill_uid(uid: int) -> bool:
    """Kill every process of the run's private uid (those that escaped the process group).

    A process running as that uid sends SIGKILL to -1: every process it may signal, which is
    exactly the processes of that uid. Returns whether any was found.
    """
    found = any(_owner(entry) == uid for entry in _proc_entries())
    if found:
        subprocess.run(
            ["/bin/kill", "-KILL", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            stderr=subprocess.DEVNULL,
            check=False,
        )
    return found


def _proc_entries() -> list[str]:
    return [name for name in os.listdir("/proc") if name.isdigit()]


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


def _head_and_tail(path: Path) -> str:
    """The start and the end of a file (the first compiler error, the last words of a crash)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size <= _STDERR_HEAD + _STDERR_TAIL:
            return handle.read().decode("utf-8", errors="replace")
        head = handle.read(_STDERR_HEAD)
        handle.seek(size - _STDERR_TAIL)
        tail = handle.read()
    skipped = size - _STDERR_HEAD - _STDERR_TAIL
    return (
        head.decode("utf-8", errors="replace")
        + f"\n… ({skipped} bytes skipped) …\n"
        + tail.decode("utf-8", errors="replace")
    )


def _looks_out_of_memory(signal_number: int | None, stderr: str) -> bool:
    markers = ("bad_alloc", "Cannot allocate memory", "out of memory", "MemoryError")
    return any(marker in stderr for marker in markers) and (
        signal_number in (signal.SIGABRT, signal.SIGKILL, signal.SIGSEGV) or signal_number is None
    )
