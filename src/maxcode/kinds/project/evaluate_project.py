"""The project evaluator: the user's own build, check and bench commands, sandboxed.

Protocol (one call of ``evaluate_project``):

1. The candidate bundle is read. Edits that could not be applied end here (a build error with
   the reason). A file outside the task's ``editable`` list, or a change outside a file's
   ``maxcode: begin/end`` region, is a ``read-only`` finding (void): the run goes on so the
   critic sees what it did, but it earns nothing.
2. Two fresh copies of the project, one for the reference and one for the candidate; the
   candidate's files are written into its copy. Files listed as ``hidden`` are removed.
3. ``build`` in each copy (both at once), sandboxed like a C++ compile. The reference must
   build (else the task is broken: ``TaskError``); a candidate that does not is a build error.
4. After the build the copy's files are recorded. Every later run (check, held-out check,
   bench) starts from that state: files it created are deleted afterwards, and a file it
   changed is a ``read-only`` finding (runs are stateless; tests and the bench cannot be
   rewritten by the code they judge).
5. ``check`` on the reference (must pass), then the candidate; then each held-out check (their
   output is withheld). A failure is a wrong answer with the check's output (bounded).
6. ``bench``: one warm-up run of each, then ``repeats`` rounds, reference and candidate back
   to back, which one goes first alternating. Every run must exit 0. Cost by ``metric``:
   ``wall`` the run's wall time as the sandbox's init measured it; ``printed`` the number the
   bench printed; ``instructions`` the instructions of every process of one run under
   callgrind. The speedup is the median of the per-round ratios with its 95% interval.

Runs get the task's CPU budget (``cpus``; one CPU: pinned, CPU time checked against wall time)
and the integrity rules of C++ programs: processes left running and more CPU than the budget
void the result.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from maxcode.errors import MaxcodeError, TaskError
from maxcode.harness.integrity import Verdict, isolation_flags
from maxcode.harness.measurement import FixedRounds, Measurement, time_rounds
from maxcode.harness.runs import (
    VALGRIND_ARGS,
    VALGRIND_SLOWDOWN,
    count_instructions,
    note_run,
    python_paths,
)
from maxcode.harness.sandbox import Limits, Run, Sandbox, SandboxResult, make_scratch
from maxcode.harness.stats import SpeedupInterval, paired_speedup
from maxcode.harness.turns import cpu_turn, timing_cpu
from maxcode.kinds.base import read_candidate_file
from maxcode.kinds.project.spec import (
    SKIPPED,
    ProjectMetric,
    ProjectSpec,
    ProjectTask,
    is_hidden,
    parse_bundle,
    region_problem,
)
from maxcode.types import (
    ErrorKind,
    Feedback,
    ForwardProfile,
    OperatorShare,
    TestOutcome,
)

OUTPUT_IN_FEEDBACK = 2000
"""Characters of a failing command's output kept in the verdict (its end: pytest and most
test runners sum up there)."""
_PROFILE_FILE = ".maxcode-profile.out"
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_BUILD_MEMORY = 8 << 30


@dataclass
class _Side:
    """One program's copy of the project."""

    name: str
    """reference or candidate."""
    folder: Path
    """Its copy (the working folder of every run)."""
    manifest: dict[str, str] = field(default_factory=dict)
    """The copy's files after the build: relative path -> sha256."""


@dataclass
class _Project:
    """Runs commands in the copies, and keeps the copies as they were after the build."""

    task: ProjectTask
    spec: ProjectSpec
    sandbox: Sandbox
    verdict: Verdict
    cpu: int | None
    phases: dict[str, float] = field(default_factory=dict)
    outcomes: list[TestOutcome] = field(default_factory=list)
    """The checks' outcomes, once they all passed."""

    @property
    def limits(self) -> Limits:
        return Limits(
            wall_s=self.task.timeout_s,
            memory_bytes=self.task.memory_mb << 20,
            processes=256,
        )

    def environment(self, side: _Side) -> dict[str, str]:
        python_bin = str(Path(sys.executable).parent)
        return {
            "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(side.folder),
            "TMPDIR": str(side.folder),
            # The run's uid has no passwd entry: tools that ask for the user's name get one.
            "USER": "maxcode",
            "LOGNAME": "maxcode",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "PYTEST_ADDOPTS": "-p no:cacheprovider",
            "OMP_NUM_THREADS": str(self.task.cpus),
            "MAKEFLAGS": f"-j{max(1, min(os.cpu_count() or 1, 4))}",
            **self.spec.env,
        }

    def readonly(self) -> list[Path]:
        return [*python_paths(), *self.spec.visible]

    def run(
        self,
        side: _Side,
        command: str,
        *,
        limits: Limits | None = None,
        timed: bool = False,
        prefix: tuple[str, ...] = (),
        aux_fd: int | None = None,
    ) -> SandboxResult:
        """One sandboxed run of ``command`` in the side's copy; afterwards the copy is put back
        as it was after the build (what the run changed is a finding)."""
        argv = [*prefix, *command_argv(command)]
        result = self.sandbox.run_batch(
            argv,
            [Run(workdir=side.folder, aux_fd=aux_fd)],
            readonly=self.readonly(),
            limits=limits or self.limits,
            cpu=self.cpu if timed else None,
            env=self.environment(side),
        )[0]
        if side.name == "candidate":
            note_run(self.verdict, self.task.cpus, result, timed)
        changed = restore(side)
        if changed:
            listed = ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
            if side.name == "candidate":
                self.verdict.flag("read-only", f"a run of `{command}` changed {listed}")
            else:
                self.verdict.flag("task", f"the reference's `{command}` changed {listed}")
        return result

    def timed(self, label: str) -> _Phase:
        return _Phase(self.phases, label)


@dataclass
class _Phase:
    phases: dict[str, float]
    label: str
    started: float = 0.0

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.phases[self.label] = self.phases.get(self.label, 0.0) + (
            time.perf_counter() - self.started
        )


_SHELL_CHARACTERS = set("|&;<>()$`\\\"'*?[]#~=%{}\n")


def command_argv(command: str) -> list[str]:
    """A command as argv: split when it is a plain command line (so callgrind counts the
    program itself, not a shell that replaced itself), else run by ``/bin/sh -c``."""
    if any(character in _SHELL_CHARACTERS for character in command):
        return ["/bin/sh", "-c", command]
    return shlex.split(command)


def evaluate_project(
    task: ProjectTask,
    candidate: str,
    *,
    metric: str | None = None,
    repeats: int | None = None,
    sandbox: Sandbox | None = None,
    cpu: int | None = None,
    profile: bool = False,
    bar: float | None = None,
) -> Feedback:
    """Judge a candidate bundle against a project task's reference (see the module's
    docstring). ``metric``: None (or ``wall``) for the task's own ``bench_metric``;
    ``instructions`` counts the bench under callgrind whatever the task says. ``bar``: a
    search's screen, whose timed rounds stop once the candidate is surely below this reward
    (once its interval is a 95% one: six rounds or more)."""
    spec = task.project
    started = time.perf_counter()
    sandbox = sandbox or Sandbox()
    chosen = project_metric(spec, metric)
    if chosen == "instructions" and shutil.which("valgrind") is None:
        raise TaskError("--metric instructions needs valgrind (apt-get install valgrind)")
    checks = 1 + len(spec.held_out)
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    verdict = Verdict(
        task.name,
        chosen,
        sandbox.isolation,
        digest,
        checks,
        flags=isolation_flags(sandbox.isolation, sandbox.unsafe_ok),
    )
    bundle = parse_bundle(candidate)
    reference = task.reference_files()
    if bundle.error is not None:
        return _edit_failure(verdict, bundle.error)
    problem = _unsafe_path(bundle.files)
    if problem:
        return _edit_failure(verdict, problem)
    changes = {path: text for path, text in bundle.files.items() if reference.get(path) != text}
    for path in sorted(changes):
        if path not in spec.editable:
            verdict.flag("read-only", f"the candidate changed {path}, which is not editable")
        elif path in spec.regions:
            region = region_problem(reference[path], changes[path])
            if region:
                verdict.flag("read-only", f"{path}: {region}")
    pin = (timing_cpu() if cpu is None else cpu) if task.cpus == 1 else None
    project = _Project(task, spec, sandbox, verdict, pin)
    root = make_scratch("maxcode-project-")
    os.chmod(root, 0o755)
    try:
        with project.timed("copy"):
            sides = [_copy(spec, root, "reference", {}), _copy(spec, root, "candidate", changes)]
        with project.timed("build"):
            failure = _build(project, sides)
        if failure is not None:
            return _finish(project, failure, started)
        with project.timed("check"):
            failure = _checks(project, sides)
        if failure is not None:
            return _finish(project, failure, started)
        with project.timed("bench"), cpu_turn(pin if chosen != "instructions" else None):
            measured = _bench(project, sides, chosen, repeats or task.repeats, bar)
        if measured.correct and profile:
            with project.timed("profile"):
                found = _profile(project, sides[1])
            if found is not None:
                measured = measured.model_copy(update={"profiles": {"candidate": found}})
        return _finish(project, measured, started)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def project_metric(spec: ProjectSpec, metric: str | None) -> ProjectMetric:
    """The cost a project is judged by: its own ``bench_metric``, unless ``instructions`` (or
    ``printed``, when its bench prints one) is asked for."""
    if metric in (None, "wall"):
        return spec.metric
    if metric == "instructions":
        return "instructions"
    if metric == "printed":
        return "printed"
    raise MaxcodeError(f"unknown metric {metric!r} (wall, printed or instructions)")


def _finish(project: _Project, feedback: Feedback, started: float) -> Feedback:
    phases = dict(project.phases)
    phases["total"] = time.perf_counter() - started
    return feedback.model_copy(update={"phases": phases})


def _unsafe_path(files: dict[str, str]) -> str:
    for path in files:
        parts = Path(path).parts
        if Path(path).is_absolute() or ".." in parts or not parts:
            return f"{path!r} is not a path inside the project"
        if parts[0] in SKIPPED or path == "task.toml":
            return f"{path} cannot be changed by a candidate"
    return ""


def _edit_failure(verdict: Verdict, message: str) -> Feedback:
    return verdict.failed(
        "compile_error",
        f"the edits could not be applied: {message}",
        compiled=False,
        compile_output=message,
    )


def _copy(spec: ProjectSpec, root: Path, name: str, changes: dict[str, str]) -> _Side:
    """A fresh copy of the project (hidden paths left out) with ``changes`` written in."""
    folder = root / name

    def ignore(directory: str, names: list[str]) -> set[str]:
        relative = Path(directory).relative_to(spec.root)
        return {
            entry
            for entry in names
            if entry in SKIPPED or is_hidden(spec, (relative / entry).as_posix())
        }

    shutil.copytree(spec.root, folder, symlinks=True, ignore=ignore)
    for path, text in changes.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(text, encoding="utf-8")
    return _Side(name, folder)


def _manifest(folder: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for directory, dirs, names in os.walk(folder):
        dirs.sort()
        for entry in names:
            path = Path(directory, entry)
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink():
                found[relative] = "link:" + os.readlink(path)
            elif path.is_file():
                found[relative] = _digest(path)
    return found


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def restore(side: _Side) -> list[str]:
    """Put a copy back as it was after the build: files a run created are deleted; returns
    the recorded files a run changed or removed (which stay as they are: the verdict is void)."""
    now = _manifest(side.folder)
    for path in sorted(set(now) - set(side.manifest), reverse=True):
        try:
            (side.folder / path).unlink()
        except OSError:
            pass
    for directory, dirs, _ in os.walk(side.folder, topdown=False):
        for entry in dirs:
            candidate = Path(directory, entry)
            relative = candidate.relative_to(side.folder).as_posix()
            if not any(path.startswith(relative + "/") for path in side.manifest):
                shutil.rmtree(candidate, ignore_errors=True)
    return sorted(path for path, digest in side.manifest.items() if now.get(path) != digest)


def _tail(result: SandboxResult) -> str:
    """The end of a command's output (stdout, then stderr), bounded."""
    text = result.stdout.decode("utf-8", errors="replace").rstrip()
    if result.stderr.strip():
        text = (text + "\n" + result.stderr.rstrip()).strip()
    if len(text) > OUTPUT_IN_FEEDBACK:
        text = "…" + text[-OUTPUT_IN_FEEDBACK:]
    return text


def _why(result: SandboxResult, limits: Limits) -> tuple[ErrorKind, str]:
    if result.limit_hit == "wall":
        return "timeout", f"no end within {limits.wall_s:g} s (killed)"
    if result.limit_hit == "cpu":
        return "timeout", "CPU time limit exceeded (killed)"
    if result.limit_hit == "memory":
        return "memory_limit", "memory limit exceeded"
    if result.limit_hit == "output":
        return "output_limit", f"wrote more than {limits.file_size_bytes >> 20} MiB (killed)"
    if result.signal is not None:
        return "runtime_error", f"killed by signal {result.signal}"
    return "wrong_answer", f"exit status {result.exit_code}"


def _build(project: _Project, sides: list[_Side]) -> Feedback | None:
    spec = project.spec
    if spec.build.strip():
        limits = Limits(
            wall_s=spec.build_timeout_s,
            memory_bytes=_BUILD_MEMORY,
            file_size_bytes=1 << 30,
            processes=512,
        )
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(
                pool.map(
                    lambda side: project.sandbox.run_batch(
                        command_argv(spec.build),
                        [Run(workdir=side.folder)],
                        readonly=project.readonly(),
                        limits=limits,
                        env=project.environment(side),
                    )[0],
                    sides,
                )
            )
        reference, candidate = results
        if not reference.ok:
            _, why = _why(reference, limits)
            last = _tail(reference).splitlines()[-1:] or [""]
            raise TaskError(
                f"{project.task.origin}: the reference does not build ({why}): {last[0]}"
            )
        if not candidate.ok:
            _, why = _why(candidate, limits)
            output = _tail(candidate)
            first_error = next(
                (line for line in output.splitlines() if "error" in line.lower()), why
            )
            return project.verdict.failed(
                "compile_error",
                f"the build failed ({why}): {first_error.strip()}",
                compiled=False,
                compile_output=output,
            )
    for side in sides:
        side.manifest = _manifest(side.folder)
    return None


def _checks(project: _Project, sides: list[_Side]) -> Feedback | None:
    """The check, then each held-out check (with the hidden files put back for them)."""
    reference, candidate = sides
    spec = project.spec
    outcomes: list[TestOutcome] = []
    commands = [(spec.check, False), *((command, True) for command in spec.held_out)]
    for index, (command, held_out) in enumerate(commands):
        if held_out and index == 1 and spec.hidden:
            for side in sides:
                _reveal_hidden(spec, side)
        result = project.run(reference, command)
        if not result.ok:
            _, why = _why(result, project.limits)
            last = _tail(result).splitlines()[-1:] or [""]
            raise TaskError(
                f"{project.task.origin}: the reference fails its own check `{command}` "
                f"({why}): {last[0]}"
            )
        result = project.run(candidate, command)
        if result.ok:
            outcomes.append(
                TestOutcome(index=index, status="passed", seconds=result.wall_s, hidden=held_out)
            )
            continue
        kind, why = _why(result, project.limits)
        status = "wrong_answer" if kind == "compile_error" else kind
        if held_out:
            project.verdict.flag("held-out", "a held-out check failed")
            outcomes.append(TestOutcome(index=index, status=status, hidden=True))
            message = "a held-out check failed"
        else:
            output = _tail(result)
            outcomes.append(
                TestOutcome(
                    index=index,
                    status=status,
                    detail=output,
                    signal=result.signal,
                    exit_code=result.exit_code,
                    seconds=result.wall_s,
                )
            )
            message = f"the check `{command}` failed ({why}):\n{output}"
        return project.verdict.failed(
            status, message, tests_passed=index, tests=outcomes, compiled=True
        )
    project.outcomes = outcomes
    return None


def _reveal_hidden(spec: ProjectSpec, side: _Side) -> None:
    """Copy the hidden paths into a copy for the held-out checks (recorded as the copy's own,
    so a run that changes them is a finding)."""
    for path in spec.hidden:
        source = spec.root / path
        target = side.folder / path
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        elif source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    side.manifest = _manifest(side.folder)


def _cost(project: _Project, result: SandboxResult, metric: ProjectMetric) -> float | None:
    if metric == "wall":
        return result.wall_s
    text = result.stdout.decode("utf-8", errors="replace")
    if project.spec.bench_pattern is not None:
        matches = re.findall(project.spec.bench_pattern, text)
        if not matches:
            return None
        last = matches[-1]
        raw = last[0] if isinstance(last, tuple) else last
    else:
        numbers = _NUMBER.findall(text)
        if not numbers:
            return None
        raw = numbers[-1]
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _bench(
    project: _Project,
    sides: list[_Side],
    metric: ProjectMetric,
    repeats: int,
    bar: float | None = None,
) -> Feedback:
    """The bench's cost for both sides: once each under callgrind (``instructions``), or a
    warm-up round and ``repeats`` timed rounds (``harness.measurement.FixedRounds``; a screen's stop
    at ``bar``)."""
    reference, candidate = sides
    command = project.spec.bench
    outcomes = project.outcomes
    if metric == "instructions":
        reference_count, reference_lost = _instructions(project, reference)
        candidate_count, lost = _instructions(project, candidate)
        if reference_count is None:
            raise TaskError(
                f"{project.task.origin}: the bench under callgrind gave no count for the "
                f"reference: {reference_lost}"
            )
        if candidate_count is None:
            if lost.startswith("failed"):
                return project.verdict.failed(
                    "runtime_error",
                    f"the bench `{command}` {lost}",
                    tests_passed=len(outcomes),
                    tests=outcomes,
                )
            project.verdict.flag("untracked", lost)
            candidate_count = reference_count
        reference_costs = [float(reference_count)]
        candidate_costs = [float(candidate_count)]
        return _correct(project, outcomes, reference_costs, candidate_costs, 1)
    warm_up = _bench_round(project, sides, metric, 0)  # round 0: the warm-up, not kept
    if isinstance(warm_up, Feedback):
        return warm_up
    measurement = Measurement(floor=_floor(project))

    def take(batch: int) -> Feedback | None:
        for _ in range(batch):
            costs = _bench_round(project, sides, metric, measurement.rounds + 1)
            if isinstance(costs, Feedback):
                return costs
            measurement.add(*costs)
        return None

    ended = time_rounds(take, measurement, FixedRounds(repeats, bar), first=min(repeats, 1))
    if ended is not None:
        return ended
    return _correct(
        project, outcomes, measurement.reference, measurement.candidate, measurement.rounds
    )


def _bench_round(
    project: _Project, sides: list[_Side], metric: ProjectMetric, round_number: int
) -> tuple[float, float] | Feedback:
    """One round of the bench, reference and candidate in an order that alternates between
    rounds: their costs, or the verdict when a run failed (a reference that fails its first
    round is a broken task)."""
    reference = sides[0]
    command = project.spec.bench
    outcomes = project.outcomes
    costs: dict[str, float] = {}
    for side in sides if round_number % 2 == 0 else sides[::-1]:
        result = project.run(side, command, timed=True)
        cost = _cost(project, result, metric) if result.ok else None
        if side is reference and cost is None:
            why = _why(result, project.limits)[1] if not result.ok else "printed no cost"
            if round_number == 0:
                raise TaskError(
                    f"{project.task.origin}: the reference's bench `{command}` failed "
                    f"({why}): {(_tail(result).splitlines()[-1:] or [''])[0]}"
                )
            project.verdict.flag(
                "evidence", f"the reference's bench failed on round {round_number} ({why})"
            )
            return project.verdict.unmeasured(True, len(outcomes), tests=outcomes)
        if cost is None:
            kind, why = (
                _why(result, project.limits)
                if not result.ok
                else ("wrong_answer", "printed no cost")
            )
            if round_number > 0:
                project.verdict.flag(
                    "nondeterministic", f"the bench failed on timed round {round_number}"
                )
            status: ErrorKind = "runtime_error" if kind == "wrong_answer" else kind
            return project.verdict.failed(
                status,
                f"the bench `{command}` failed ({why}):\n{_tail(result)}",
                tests_passed=len(outcomes),
                tests=outcomes,
            )
        costs[side.name] = cost
    return costs["reference"], costs["candidate"]


def _interval(
    project: _Project, reference_costs: list[float], candidate_costs: list[float]
) -> SpeedupInterval:
    """The paired speedup of the bench's costs (``_floor``)."""
    return paired_speedup(reference_costs, candidate_costs, floor=_floor(project))


def _floor(project: _Project) -> float:
    """The least cost a bench round counts (seconds below 0.1 ms count as 0.1 ms)."""
    return 1e-4 if project.verdict.metric == "wall" else 1e-9


def _correct(
    project: _Project,
    outcomes: list[TestOutcome],
    reference_costs: list[float],
    candidate_costs: list[float],
    repeats: int,
) -> Feedback:
    interval = _interval(project, reference_costs, candidate_costs)
    project.verdict.implausible(interval.estimate)
    if project.verdict.metric == "wall" and statistics.median(candidate_costs) < 1e-3:
        project.verdict.flag(
            "timing-floor", "the bench runs in under a millisecond; make it do more work"
        )
    reference_cost = statistics.median(reference_costs)
    candidate_cost = statistics.median(candidate_costs)
    return project.verdict.make(
        compiled=True,
        correct=True,
        speedup=interval.estimate,
        speedup_interval=(interval.low, interval.high),
        reference_cost=reference_cost,
        candidate_cost=candidate_cost,
        tests_passed=len(outcomes),
        tests=outcomes,
        # Per check, as Feedback's per-test lists are read: the bench belongs to the first.
        reference_costs=[reference_cost],
        candidate_costs=[candidate_cost],
        repeats=repeats,
    )


def _instructions(project: _Project, side: _Side) -> tuple[int | None, str]:
    """The bench's instructions under callgrind (every process it starts); the log comes
    back on a descriptor the bench cannot reach."""
    task = project.task
    limits = Limits(
        wall_s=max(60.0, task.timeout_s * VALGRIND_SLOWDOWN),
        memory_bytes=(task.memory_mb << 20) + (1 << 30),
        processes=256,
    )
    prefix = (*VALGRIND_ARGS, "--callgrind-out-file=/dev/null", "--log-fd=3")
    with tempfile.TemporaryFile(prefix="maxcode-callgrind-") as log:
        result = project.run(
            side, project.spec.bench, limits=limits, prefix=prefix, aux_fd=log.fileno()
        )
        log.seek(0)
        text = log.read().decode(errors="replace")
    if not result.ok:
        return None, f"failed under callgrind ({_why(result, limits)[1]}):\n{_tail(result)}"
    counted = count_instructions(result, text)
    return counted.instructions, counted.lost


def _profile(project: _Project, side: _Side) -> ForwardProfile | None:
    """cProfile's top functions of one bench run, when the bench is a Python command."""
    argv = command_argv(project.spec.bench)
    if not argv or not Path(argv[0]).name.startswith("python") or argv[1:2] == ["-m"]:
        return None
    profiled = [argv[0], "-m", "cProfile", "-o", _PROFILE_FILE, *argv[1:]]
    script = (
        "import pstats,sys\n"
        f"s=pstats.Stats({_PROFILE_FILE!r})\n"
        "total=sum(v[2] for v in s.stats.values()) or 1e-12\n"
        "calls=sum(v[1] for v in s.stats.values())\n"
        "print('calls', calls)\n"
        "rows=sorted(s.stats.items(), key=lambda kv: -kv[1][2])[:8]\n"
        "for (f,l,n),v in rows: print(v[2]/total, v[1], f'{n} ({f.rsplit(\"/\",1)[-1]}:{l})')\n"
    )
    # One sandboxed run records and reads the profile: its file never reaches the parent.
    command = shlex.join(profiled) + " >/dev/null && " + shlex.join([argv[0], "-c", script])
    result = project.run(side, command)
    if not result.ok:
        return None
    top: list[OperatorShare] = []
    launches = 0.0
    for line in result.stdout.decode(errors="replace").splitlines()[:9]:
        words = line.split(" ", 2)
        try:
            if words[0] == "calls":
                launches = float(words[1])
            elif len(words) == 3:
                top.append(
                    OperatorShare(name=words[2][:120], share=float(words[0]), calls=float(words[1]))
                )
        except ValueError:
            continue
    if not top:
        return None
    return ForwardProfile(clock="cpu", top=top, launches=launches, allocated_bytes=0)


# --- candidates from files (``maxcode eval TASK CANDIDATE``) ---------------------------------


def load_candidate(task: ProjectTask, path: Path) -> str:
    """A project candidate as a bundle, from a folder of replacement files (relative paths as
    in the project), a unified diff (``.diff``/``.patch``, or text starting like one), a
    bundle, or one file (the task's single editable file, or the editable file of that
    name)."""
    from maxcode.kinds.project.edits import EditError, apply_unified_diff
    from maxcode.kinds.project.spec import render_bundle

    spec = task.project
    base = task.reference_files()
    if path.is_dir():
        files = dict(base)
        for entry in sorted(path.rglob("*")):
            if entry.is_file() and not any(part in SKIPPED for part in entry.parts):
                files[entry.relative_to(path).as_posix()] = read_candidate_file(entry)
        return render_bundle(files)
    text = read_candidate_file(path)
    if path.suffix in (".diff", ".patch") or text.startswith(("--- ", "diff ", "Index: ")):
        try:
            return render_bundle({**base, **apply_unified_diff(text, base, spec)})
        except EditError as error:
            return render_bundle(base, error=str(error))
    bundled = parse_bundle(text)
    if bundled.files and set(bundled.files) <= spec.files:
        return render_bundle({**base, **bundled.files})
    if len(spec.editable) == 1:
        return render_bundle({spec.editable[0]: text})
    named = [editable for editable in spec.editable if Path(editable).name == path.name]
    if len(named) == 1:
        return render_bundle({**base, named[0]: text})
    raise MaxcodeError(
        f"{path}: the task has {len(spec.editable)} editable files "
        f"({', '.join(spec.editable)}); give a folder of files, a diff, or a file named "
        "like one of them"
    )
