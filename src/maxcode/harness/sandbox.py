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
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal, get_args

from maxcode.errors import MaxcodeError

Isolation = Literal["bwrap", "unshare", "rlimits"]
"""The isolation levels, strongest first (the one definition of their names)."""
Pin = int | frozenset[int] | None
"""The CPUs a run is pinned to: one, several, or None (any)."""
IsolationChoice = Literal["auto", Isolation]
"""A level, or ``auto``: the strongest that works here (never a weaker one silently)."""
ISOLATION_LEVELS: tuple[Isolation, ...] = get_args(Isolation)
ISOLATION_CHOICES: tuple[IsolationChoice, ...] = ("auto", *ISOLATION_LEVELS)
LimitHit = Literal["wall", "cpu", "memory", "output"]

_UID_BASE = 10_000_000
_UID_SLOTS = 64
_KILL_GRACE_S = 0.2
_STDERR_HEAD = 3072
_STDERR_TAIL = 1024


RUNS_PER_START = 1024
"""Runs one sandbox start holds at most (``run_batch`` starts again for the rest). The init
takes seven arguments a run and bwrap refuses a command line of more than 9,000 ("Exceeded
maximum number of arguments"): a larger batch would fail whole, every run reported killed at
its wall limit."""


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

    @property
    def cpu_seconds(self) -> float:
        """The CPU-seconds limit in effect (``cpu_s``, else the wall limit plus one second)."""
        return self.cpu_s if self.cpu_s is not None else self.wall_s + 1

    @property
    def cpu_rlimit(self) -> int:
        """``cpu_seconds`` as the whole seconds ``RLIMIT_CPU`` is set to."""
        return max(1, int(self.cpu_seconds + 0.999))


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
    """A fresh scratch folder that a sandboxed run's own uid can reach, in ``scratch_base()``.
    Its name carries this process's id (``maxcode-run-p1234-...``), so that what a killed
    process left behind can be found (``remove_scratch_of``)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}p{os.getpid()}-", dir=scratch_base()))


def remove_scratch_of(pid: int, min_age_s: float = 0.0) -> list[Path]:
    """Remove the scratch folders that process ``pid``, now gone, left behind (untouched for
    ``min_age_s``); returns them. Nothing is removed while a process with that id runs (it may
    be one reusing the id)."""
    try:
        os.kill(pid, 0)
        return []
    except ProcessLookupError:
        pass
    except PermissionError:
        return []
    removed = []
    now = time.time()
    for folder in scratch_base().glob(f"maxcode-*-p{pid}-*"):
        if folder.is_symlink() or not folder.is_dir():
            continue
        status = folder.lstat()
        if status.st_uid == os.geteuid() and now - status.st_mtime >= min_age_s:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


_SCRATCH_NAME = re.compile(r"maxcode-[a-z]+-p(\d+)-")


def remove_orphan_scratch(min_age_s: float = 60.0) -> list[Path]:
    """Remove the scratch folders of every process that is gone (``maxcode doctor --clean``):
    what killed runs left behind."""
    pids = {
        int(found.group(1))
        for folder in scratch_base().glob("maxcode-*-p*-*")
        if (found := _SCRATCH_NAME.match(folder.name))
    }
    return [folder for pid in sorted(pids) for folder in remove_scratch_of(pid, min_age_s)]


def scratch_base() -> Path:
    """Where scratch folders are made: the system temporary folder, unless some folder on its
    path is closed to other users (a private ``TMPDIR``); then ``/tmp``."""
    base = Path(tempfile.gettempdir()).resolve()
    return base if _world_traversable(base) else Path("/tmp")


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
            probe = Sandbox(level, unsafe_ok=True)
            result = probe.run(["/usr/bin/true"], scratch=scratch, limits=Limits(5))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return result.ok
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return False


class ScratchUnavailable(MaxcodeError):
    """The temporary folder where sandboxes run cannot be written (full, read-only)."""


def check_scratch() -> None:
    """Raise ``ScratchUnavailable`` when no scratch folder can be written: every sandbox
    needs one, so a level that "does not start" there says nothing of the sandbox."""
    from maxcode.home import write_problem

    # Python skips a TMPDIR it cannot write; compilers and the sandbox's init build do not.
    folders = [scratch_base(), Path(tempfile.gettempdir())]
    if os.environ.get("TMPDIR") and Path(os.environ["TMPDIR"]).is_dir():
        folders.append(Path(os.environ["TMPDIR"]))
    for folder in dict.fromkeys(folders):
        problem = write_problem(folder)
        if problem is not None:
            raise ScratchUnavailable(
                f"the temporary folder {problem}; free space there or set TMPDIR to a writable"
                " folder (the sandbox itself was not tried)"
            )


def detect_isolation() -> Isolation:
    """The strongest isolation level that works on this machine (after ``check_scratch``: a
    full temporary folder is said as such, not taken for a sandbox that does not start)."""
    check_scratch()
    if shutil.which("bwrap") and _probe("bwrap"):
        return "bwrap"
    if shutil.which("unshare") and _probe("unshare"):
        return "unshare"
    return "rlimits"


@dataclass(frozen=True)
class Run:
    """One execution of the program in a batch."""

    stdin: Path | None = None
    """File fed to stdin (None: empty input)."""
    workdir: Path | None = None
    """A prepared folder (from ``make_scratch``) to run in and keep; None: a fresh private
    folder that no other run of the batch can find, deleted afterwards."""
    aux_fd: int | None = None
    """A descriptor of the parent's handed to the program as descriptor 3 (valgrind's log)."""
    argv: tuple[str, ...] | None = None
    """The command of this run, when it is not the batch's (a batch may mix programs)."""


SAFE_LEVELS: tuple[Isolation, ...] = ("bwrap", "unshare")
"""Levels that keep expected outputs unreadable by the program and start every run with no
state from an earlier one (own mount, ipc and pid namespaces, fresh /tmp and /dev/shm)."""


class UnsafeIsolation(MaxcodeError):
    """The isolation level here cannot keep a measurement honest and the user did not opt in."""


def require_safe(isolation: Isolation, unsafe_ok: bool) -> None:
    """Refuse a level outside ``SAFE_LEVELS`` unless the user accepted it explicitly."""
    if isolation in SAFE_LEVELS or unsafe_ok:
        return
    raise UnsafeIsolation(
        f"isolation {isolation!r} cannot keep expected outputs private or runs stateless "
        "(install bubblewrap: apt-get install bubblewrap; or accept it with --unsafe-isolation)"
    )


class Sandbox:
    """Runs commands under one isolation level (``auto``: the strongest available).

    ``unsafe_ok``: the user accepted a level outside ``SAFE_LEVELS`` (``--unsafe-isolation``);
    without it such a level is refused here, so a weaker sandbox is never chosen silently."""

    def __init__(self, isolation: IsolationChoice = "auto", *, unsafe_ok: bool = False) -> None:
        self.isolation: Isolation = detect_isolation() if isolation == "auto" else isolation
        self.unsafe_ok = unsafe_ok
        require_safe(self.isolation, unsafe_ok)
        self.drops_uid = _is_root()

    def run(
        self,
        argv: Sequence[str],
        *,
        scratch: Path | None = None,
        stdin: Path | None = None,
        readonly: Sequence[Path] = (),
        limits: Limits | None = None,
        cpu: Pin = None,
        env: Mapping[str, str] | None = None,
        hidden: Sequence[Path] = (),
    ) -> SandboxResult:
        """Run ``argv`` once; ``scratch`` (from ``make_scratch``) is its working folder, kept."""
        run = Run(stdin=stdin, workdir=scratch)
        return self.run_batch(
            argv, [run], readonly=readonly, limits=limits, cpu=cpu, env=env, hidden=hidden
        )[0]

    def run_batch(
        self,
        argv: Sequence[str] | None,
        runs: Sequence[Run],
        *,
        readonly: Sequence[Path] = (),
        limits: Limits | None = None,
        cpu: Pin = None,
        env: Mapping[str, str] | None = None,
        writable: Sequence[Path] = (),
        devices: Sequence[str] = (),
        hidden: Sequence[Path] = (),
        on_start: Callable[[int], None] | None = None,
    ) -> list[SandboxResult]:
        """Run ``argv`` (or a run's own ``argv``) once per ``Run``, one after the other, in one
        sandbox.

        Each run gets its own working folder, its own descriptors and the full limits; what a
        run leaves behind (processes, files in its private folder) does not reach the next.
        ``readonly`` paths are visible read-only (even ones behind folders closed to the run's
        uid, such as an interpreter under ``/root``); ``writable`` folders are shared by the
        runs (a build cache); ``devices`` are device nodes the runs may open (a GPU); ``cpu``
        pins every run to one CPU or to a set of them (a request: the judge compares CPU time
        with wall time); ``hidden`` folders (expected outputs) are covered where the level shows
        the host's file system; ``on_start`` is told the pid of the process that starts the
        batch (its runs are below it, under the init). Every run starts with no state from an
        earlier one: its own ipc and mount namespaces, and (when private) an empty folder of its
        own. More than ``RUNS_PER_START`` runs take several starts, one after the other. The
        first run that reaches its wall limit ends the batch: the runs after it are not run
        (each would cost its whole limit, and none can change a verdict the timeout has decided)
        and come back as the init never reported them (killed, no time).
        """
        limits = limits or Limits()
        if argv is None and any(run.argv is None for run in runs):
            raise ValueError("a run has no command and the batch gives none")
        if devices and len(runs) != 1:
            raise ValueError("a batch with devices holds one run (its /dev/shm is not per run)")
        if len(runs) > RUNS_PER_START:
            results: list[SandboxResult] = []
            for first in range(0, len(runs), RUNS_PER_START):
                results += self.run_batch(
                    argv,
                    runs[first : first + RUNS_PER_START],
                    readonly=readonly,
                    limits=limits,
                    cpu=cpu,
                    env=env,
                    writable=writable,
                    devices=devices,
                    hidden=hidden,
                    on_start=on_start,
                )
                if any(result.limit_hit == "wall" for result in results):
                    break
            unrun = len(runs) - len(results)
            return results + [_unreported(self.isolation) for _ in range(unrun)]
        uid = _uids.acquire() if self.drops_uid else None
        private_root = make_scratch("maxcode-batch-")
        try:
            # Other uids may enter the root but not list it: a run cannot find its siblings.
            os.chmod(private_root, 0o711 if uid is not None else 0o311)
            workdirs = []
            for run in runs:
                if run.workdir is not None:
                    workdir = run.workdir.resolve()
                else:
                    workdir = private_root / secrets.token_hex(16)
                    workdir.mkdir(mode=0o700)
                if uid is not None:
                    _chown_tree(workdir, uid)
                workdirs.append(workdir)
            with tempfile.TemporaryDirectory(prefix="maxcode-io-") as io_dir:
                batch = _Batch(
                    self,
                    argv,
                    runs,
                    workdirs,
                    private_root,
                    Path(io_dir),
                    uid,
                    writable,
                    devices,
                    hidden,
                )
                return batch.execute(readonly, limits, cpu, env or {}, on_start)
        finally:
            if uid is not None:
                _uids.release(uid)
            os.chmod(private_root, 0o700)
            shutil.rmtree(private_root, ignore_errors=True)

    def wrap(
        self,
        argv: Sequence[str],
        writable: Sequence[Path],
        readonly: Sequence[Path],
        environment: Mapping[str, str],
        uid: int | None,
        devices: Sequence[str] = (),
        staged: Mapping[Path, Path] | None = None,
    ) -> list[str]:
        """The command that starts ``argv`` (already prefixed by the init) at this level.

        ``staged`` maps read-only paths the run's uid cannot reach to world-traversable empty
        folders: a root helper binds each path there in a private mount namespace, drops to the
        uid, and bwrap binds the stage back at the original path."""
        staged = staged or {}
        if self.isolation == "bwrap":
            # --as-pid-1 makes our init pid 1. bwrap's own init would be left a zombie for the
            # host's pid 1 to reap, which a container's pid 1 may never do.
            command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1"]
            command += _system_binds()
            command += ["--proc", "/proc", "--dev", "/dev", "--dir", "/tmp"]
            for path in readonly:
                resolved = Path(path).resolve()
                source = staged.get(resolved, resolved)
                command += ["--ro-bind", str(source), str(resolved)]
            for path in writable:
                command += ["--bind", str(staged.get(Path(path).resolve(), path)), str(path)]
            for device in devices:
                command += ["--dev-bind-try", device, device]
            if devices:
                # GPU drivers read the PCI and NUMA topology from sysfs.
                command += ["--ro-bind-try", "/sys", "/sys"]
            # Nothing but the bound folders stays writable: no /tmp or /dev/shm shared by runs.
            command += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", "/"]
            bound = [Path(path).resolve() for path in [*readonly, *writable]]
            if devices and not any(Path("/dev/shm") in [p, *p.parents] for p in bound):
                # GPU tools (Nsight Compute, CUDA IPC) want a writable /dev/shm: a fresh one for
                # this start, gone with it (a GPU batch holds a single run). TMPDIR stands in
                # for /tmp.
                command += ["--tmpfs", "/dev/shm"]
            command += ["--clearenv"]
            for key, value in environment.items():
                command += ["--setenv", key, value]
            if not staged:
                return [*command, "--", *argv]
            binds = [str(part) for pair in staged.items() for part in pair]
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
            return [
                *["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c"],
                _STAGE_SCRIPT,
                "stage",
                str(len(staged)),
                *binds,
                *drop,
                *command,
                "--",
                *argv,
            ]
        if self.isolation == "unshare":
            command = ["unshare", "--pid", "--net", "--fork", "--kill-child", "--mount-proc"]
            if uid is None:
                command.insert(1, "--map-root-user")
                return [*command, "--", *argv]
            # unshare needs root to make the namespaces; the program itself drops to the uid.
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
            return [*command, "--", *drop, *argv]
        return list(argv)


@dataclass
class _Batch:
    """One start of the sandbox running several runs: the descriptors, the wait, the report."""

    sandbox: Sandbox
    argv: Sequence[str] | None
    runs: Sequence[Run]
    workdirs: list[Path]
    private_root: Path
    io_dir: Path
    uid: int | None
    shared: Sequence[Path] = ()
    devices: Sequence[str] = ()
    hidden: Sequence[Path] = ()
    stage_root: Path | None = None

    def execute(
        self,
        readonly: Sequence[Path],
        limits: Limits,
        cpu: Pin,
        env: Mapping[str, str],
        on_start: Callable[[int], None] | None = None,
    ) -> list[SandboxResult]:
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            **env,
        }
        isolation = self.sandbox.isolation
        reach = "ns" if isolation != "rlimits" else "uid" if self.uid is not None else "group"
        opened: list[int] = []
        watch: TreeMemoryWatch | None = None
        try:
            command, passed, staged = self._command(
                readonly, limits, cpu, environment, reach, opened
            )
            root_starts = isolation == "unshare" or staged
            started = time.perf_counter()
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._open(self.io_dir / "wrapper.err", os.O_WRONLY | os.O_CREAT, opened),
                cwd="/",
                env=environment,
                start_new_session=True,
                # unshare (and the staging helper) need root to make their namespaces; they
                # drop to the uid themselves.
                user=None if root_starts else self.uid,
                group=None if root_starts else self.uid,
                extra_groups=None if root_starts or self.uid is None else [],
                close_fds=True,
                pass_fds=passed,
            )
            if on_start is not None:
                on_start(process.pid)
            # The memory limit holds for the run's whole process tree, not for each process.
            watch = TreeMemoryWatch(process.pid, limits.memory_bytes)
            # The init enforces each run's limit; this is the backstop for the whole batch.
            backstop = len(self.runs) * (limits.wall_s + 1.0) + 5.0
            finished, wall = _wait_until(process.pid, started, backstop)
            if not finished:
                kill_group(process.pid)
            os.wait4(process.pid, 0)
            process.returncode = 0
        finally:
            if watch is not None:
                watch.stop()
            for fd in opened:
                os.close(fd)
            if self.stage_root is not None:
                shutil.rmtree(self.stage_root, ignore_errors=True)
        stragglers = False
        if self.uid is not None and isolation != "bwrap":
            stragglers = _kill_uid(self.uid)
        reports = _read_reports(self.io_dir / "status")
        wrapper_error = head_and_tail(self.io_dir / "wrapper.err")
        results = [
            self._result(index, reports.get(index), limits, wrapper_error)
            for index in range(len(self.runs))
        ]
        if watch is not None and watch.killed_at is not None:
            _charge_memory(results, reports, watch.killed_at, limits)
        program_time = sum(result.wall_s for result in results)
        if results:
            results[0].startup_s = max(0.0, wall - program_time)
            results[-1].stragglers_killed = results[-1].stragglers_killed or stragglers
        return results

    def _command(
        self,
        readonly: Sequence[Path],
        limits: Limits,
        cpu: Pin,
        environment: dict[str, str],
        reach: str,
        opened: list[int],
    ) -> tuple[list[str], tuple[int, ...], bool]:
        """The batch's command line (the wrapper around the init, with every run's descriptors,
        folders and program), the descriptors it is passed, and whether folders were staged
        (the wrapper then starts as root); what it opens goes into ``opened``."""
        status_fd = self._open(self.io_dir / "status", os.O_RDWR | os.O_CREAT, opened)
        init_args = [str(_init_binary()), str(status_fd), reach]
        init_args += [
            str(max(1, int(limits.wall_s * 1000))),
            _limits_arg(limits, cpu, self.uid),
        ]
        init_args += [str(len(self.runs))]
        programs: dict[tuple[str, ...], int] = {}
        for index, (run, workdir) in enumerate(zip(self.runs, self.workdirs)):
            stdin_fd = self._open(run.stdin or Path(os.devnull), os.O_RDONLY, opened)
            out_fd = self._open(self.io_dir / f"out.{index}", os.O_WRONLY | os.O_CREAT, opened)
            err_fd = self._open(self.io_dir / f"err.{index}", os.O_WRONLY | os.O_CREAT, opened)
            aux = -1 if run.aux_fd is None else run.aux_fd
            command_line = run.argv or tuple(self.argv or ())
            program = programs.setdefault(command_line, len(programs))
            init_args += [str(stdin_fd), str(out_fd), str(err_fd), str(aux), str(workdir)]
            # A private folder is an empty tmpfs for its run: nothing written there by an
            # earlier run (which can read every folder's name off the init's command line)
            # survives into it.
            init_args += [str(program), "1" if run.workdir is None else "0"]
        init_args += [str(len(programs))]
        for command_line in programs:
            init_args += [str(len(command_line)), *command_line]
        prepared = [workdir for workdir in self.workdirs if workdir.parent != self.private_root]
        writable = [*self.shared, *prepared]
        # The batch's root is read-only to the runs: they write only in their own folders.
        readonly = [*readonly, _init_binary().parent, self.private_root]
        init_args += self._isolation_args(readonly, writable)
        staged = self._stage([*readonly, *self.shared])
        command = self.sandbox.wrap(
            init_args, writable, readonly, environment, self.uid, self.devices, staged
        )
        passed = tuple(opened) + tuple(run.aux_fd for run in self.runs if run.aux_fd is not None)
        return command, passed, bool(staged)

    def _isolation_args(self, readonly: Sequence[Path], writable: Sequence[Path]) -> list[str]:
        """The init's ISOLATE block: per run, new user, ipc and mount namespaces, and at the
        ``unshare`` level the mounts that make the host's file system look like bwrap's:
        fresh /tmp, /var/tmp and /dev/shm, every top-level folder that is not a system one
        (and every ``hidden`` path) covered by an empty read-only tmpfs, and the folders the run
        needs bound back in."""
        isolation = self.sandbox.isolation
        if isolation == "rlimits":
            return ["0", "0"]
        binds = [("ro", Path(path).resolve()) for path in readonly]
        binds += [("rw", Path(path).resolve()) for path in writable]
        if isolation == "bwrap":
            # bwrap shows the system folders read-only; each run gets a writable /tmp and
            # /var/tmp of its own (programs write there whatever TMPDIR says: a kernel's
            # sources built with torch's ``load``), with what the batch binds under them put
            # back.
            fresh = [Path(path) for path in _FRESH_FOLDERS[:2]]
            entries = [("fresh", path) for path in fresh]
            entries += [
                (kind, path)
                for kind, path in binds
                if any(path == top or top in path.parents for top in fresh)
            ]
        else:
            entries = [("fresh", Path(p)) for p in _FRESH_FOLDERS]
            covered = [Path("/", name) for name in _top_level_folders()]
            covered += [Path(path).resolve() for path in self.hidden]
            entries += [("hide", path) for path in covered]
            entries += binds
        args = ["1", str(len(entries))]
        for kind, path in entries:
            args += [kind, str(path)]
        return args

    def _stage(self, readonly: Sequence[Path]) -> dict[Path, Path]:
        """Empty world-traversable folders for the bound paths the uid cannot reach."""
        if self.uid is None or self.sandbox.isolation != "bwrap":
            return {}
        staged: dict[Path, Path] = {}
        for path in readonly:
            resolved = Path(path).resolve()
            if hidden_from_others(resolved) and resolved.is_dir():
                if self.stage_root is None:
                    self.stage_root = make_scratch("maxcode-stage-")
                    os.chmod(self.stage_root, 0o755)
                stage = self.stage_root / str(len(staged))
                stage.mkdir(mode=0o755)
                staged[resolved] = stage
        return staged

    @staticmethod
    def _open(path: Path, flags: int, opened: list[int]) -> int:
        fd = os.open(path, flags, 0o600)
        opened.append(fd)
        return fd

    def _result(
        self, index: int, report: dict[str, int] | None, limits: Limits, wrapper_error: str
    ) -> SandboxResult:
        stdout = (self.io_dir / f"out.{index}").read_bytes()[: limits.file_size_bytes]
        stderr = head_and_tail(self.io_dir / f"err.{index}")
        if report is None or "status" not in report:
            # The init never reported this run: the sandbox failed, the batch was killed, or an
            # earlier run's timeout ended it.
            unreported = _unreported(self.sandbox.isolation)
            unreported.stdout = stdout
            unreported.stderr = (stderr + wrapper_error).strip()
            return unreported
        return reported_result(report, limits, stdout, stderr, self.sandbox.isolation)


def _unreported(isolation: Isolation) -> SandboxResult:
    """A run the init never reported: killed at the wall limit, no time, no output."""
    return SandboxResult(
        exit_code=None,
        signal=signal.SIGKILL,
        limit_hit="wall",
        wall_s=0.0,
        cpu_s=0.0,
        max_rss_kb=0,
        stdout=b"",
        stderr="",
        isolation=isolation,
    )


def reported_result(
    report: Mapping[str, int],
    limits: Limits,
    stdout: bytes,
    stderr: str,
    isolation: Isolation,
) -> SandboxResult:
    """A run's result from its status line (the init's, or a KernelBench zygote's for the
    worker it forked: ``status``, ``timed_out``, ``wall_ns``, ``cpu_us``, ``maxrss_kb``,
    ``stragglers``): which limit ended it, if one did."""
    status = report["status"]
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    signal_number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    cpu_used = report["cpu_us"] / 1e6
    limit_hit: LimitHit | None = None
    if report.get("timed_out"):
        limit_hit = "wall"
    elif signal_number == signal.SIGXFSZ:
        limit_hit = "output"
    elif signal_number == signal.SIGXCPU or (
        signal_number == signal.SIGKILL and cpu_used >= limits.cpu_seconds
    ):
        limit_hit = "cpu"
    elif limits.memory_bytes is not None and _looks_out_of_memory(signal_number, stderr):
        limit_hit = "memory"
    return SandboxResult(
        exit_code=exit_code,
        signal=signal_number,
        limit_hit=limit_hit,
        wall_s=report["wall_ns"] / 1e9,
        cpu_s=cpu_used,
        max_rss_kb=report["maxrss_kb"],
        stdout=stdout,
        stderr=stderr,
        isolation=isolation,
        stragglers_killed=bool(report.get("stragglers")),
    )


def _limits_arg(limits: Limits, cpu: Pin, uid: int | None) -> str:
    """The init's LIMITS argument: AS:CPU:FSIZE:NPROC:PIN, -1 for unset."""
    fields = [
        -1 if limits.memory_bytes is None else limits.memory_bytes,
        limits.cpu_rlimit,
        limits.file_size_bytes,
        # Root ignores the process-count limit; only a run with a uid of its own gets one.
        limits.processes if uid is not None else -1,
    ]
    pins = [cpu] if isinstance(cpu, int) else sorted(cpu or ())
    return ":".join([*(str(field) for field in fields), ",".join(map(str, pins)) or "-1"])


_FRESH_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
_SYSTEM_FOLDERS = frozenset(
    {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "sys", "run"}
    | {"tmp", "var"}
)


def _top_level_folders() -> list[str]:
    """Top-level folders of the host that the ``unshare`` level covers (users' files, checkouts,
    task folders): everything but the system folders bwrap would show."""
    try:
        names = sorted(os.listdir("/"))
    except OSError:
        return []
    return [
        name
        for name in names
        if name not in _SYSTEM_FOLDERS
        and os.path.isdir(os.path.join("/", name))
        and not os.path.islink(os.path.join("/", name))
    ]


_STAGE_SCRIPT = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do mount --bind "$1" "$2" || exit 125; '
    'shift 2; n=$((n - 1)); done; exec "$@"'
)


def hidden_from_others(path: Path) -> bool:
    """Whether a uid of its own could not reach ``path`` (a folder on its way is closed)."""
    return not _world_traversable(Path(path).resolve().parent)


_REPORT_FIELD = re.compile(r"(\w+)=(-?\d+)")


def _read_reports(path: Path) -> dict[int, dict[str, int]]:
    """The init's status lines by run (a run is missing when the init was killed first)."""
    reports = {}
    for line in path.read_text(errors="replace").splitlines():
        fields = {key: int(value) for key, value in _REPORT_FIELD.findall(line)}
        if "run" in fields:
            reports[fields["run"]] = fields
    return reports


_init_lock = threading.Lock()


def _init_binary() -> Path:
    """The compiled ``maxcode-init``, copied to a folder every sandbox uid can read."""
    with _init_lock:
        return _build_init()


@cache
def _build_init() -> Path:
    from maxcode.home import cache_dir

    source = importlib.resources.files("maxcode.harness").joinpath("init.c").read_text()
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


def _charge_memory(
    results: list[SandboxResult], reports: Mapping[int, object], killed_at: int, limits: Limits
) -> None:
    """The run in flight when the tree went over its memory limit (the first the init never
    reported) is the one that hit it."""
    unreported = [index for index in range(len(results)) if index not in reports]
    if unreported:
        hit = results[unreported[0]]
        hit.limit_hit = "memory"
        hit.stderr = (
            f"{hit.stderr}\nthe run's processes together used {killed_at >> 20} MiB, over the"
            f" limit of {(limits.memory_bytes or 0) >> 20} MiB (killed)"
        ).strip()


class TreeMemoryWatch:
    """Sums the memory of every process below ``root`` every ``period_s`` and kills them all
    once the sum passes ``limit_bytes``: a limit per process would let a run that forks take
    the host's memory. What is summed is the proportional set size (pages shared after a fork
    count once), read only when the resident sizes' sum, an upper bound, passes the limit."""

    def __init__(self, root: int, limit_bytes: int | None, period_s: float = 0.05) -> None:
        self.root = root
        self.limit_bytes = limit_bytes
        self.period_s = period_s
        self.killed_at: int | None = None
        """The sum (bytes) that made the watch kill the tree; None while it has not."""
        self.peak_bytes = 0
        """The largest sum seen."""
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if limit_bytes is not None:
            self._thread = threading.Thread(target=self._watch, name="maxcode-memory", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        assert self.limit_bytes is not None
        while not self._stopped.wait(self.period_s):
            tree = _descendants(self.root)
            # Resident sizes are cheap to read (statm) and never below the proportional ones:
            # only a tree whose resident sum passes the limit is weighed by proportional set
            # size, which costs milliseconds a process (smaps_rollup walks its mappings and
            # holds its memory map's lock: a timed worker must not pay that every tick).
            total = sum(_resident_of(pid) for pid in tree)
            if total > self.limit_bytes:
                total = sum(_memory_of(pid) for pid in tree)
            self.peak_bytes = max(self.peak_bytes, total)
            if total > self.limit_bytes:
                self.killed_at = total
                for pid in [self.root, *tree]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                kill_group(self.root)
                return


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (by the kernel's children lists, threads included)."""
    found: list[int] = []
    waiting = [root]
    while waiting:
        pid = waiting.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    below = [int(child) for child in children.read().split()]
            except (OSError, ValueError):
                continue
            found += below
            waiting += below
    return found


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _resident_of(pid: int) -> int:
    """A process's resident set size in bytes; 0 for a process that is gone."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def _memory_of(pid: int) -> int:
    """A process's proportional set size in bytes (its resident size where that cannot be
    read); 0 for a process that is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return _resident_of(pid)


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


def kill_group(pid: int) -> None:
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


def head_and_tail(path: Path) -> str:
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
