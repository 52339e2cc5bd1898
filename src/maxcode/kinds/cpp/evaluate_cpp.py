"""The C++ evaluator: build a candidate, check it on every test, measure it against the reference.

Protocol (one call of ``evaluate_cpp``):

1. Build reference and candidate (cached by content hash). A compile error ends here.
2. Correctness round, which doubles as the discarded warm-up: the reference, then the
   candidate, each over every test (one sandbox start per program, a fresh private folder
   per test). The reference must pass its own tests (else the task is broken: ``TaskError``).
   The candidate must pass all of them.
3. Cost. ``wall``: rounds; each round runs both programs over every test, the order of the
   two alternating between rounds, pinned to one CPU; every timed output is checked again.
   Each sample is the program's own time as the sandbox's init measured it (sandbox start-up
   excluded). Cost = sum over tests of the median. Speedup = the median over rounds of the
   round's ratio (reference's time / candidate's, summed over tests), with its 95% interval
   (``maxcode.harness.stats``); rounds are added until that interval is within +-2% of the
   speedup (+-1% for a speedup that is reported, ``REPORTED``) or a cap is reached
   (``_measure_wall`` over ``maxcode.harness.measurement``).
   ``instructions``: each test once under callgrind, both programs; the count comes from
   valgrind's log on a descriptor the program cannot reach; reference counts are cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from maxcode.errors import TaskError
from maxcode.harness.build import BINARY_NAME, SOURCE_NAME, CompileResult, build_cpp
from maxcode.harness.compare import compare_output
from maxcode.harness.integrity import Verdict, isolation_flags
from maxcode.harness.measurement import Measurement, Precision, time_rounds
from maxcode.harness.profile import cpp_profile, parse_callgrind
from maxcode.harness.runs import (
    VALGRIND_ARGS,
    VALGRIND_SLOWDOWN,
    Counted,
    count_instructions,
    note_run,
)
from maxcode.harness.sandbox import Limits, Run, Sandbox, SandboxResult, make_scratch
from maxcode.harness.stats import SpeedupInterval, exact
from maxcode.harness.turns import (
    REPORTED,
    CpuTurn,
    cpu_turn,
    timing_budget_s,
    timing_cpu,
    usable_cpus,
)
from maxcode.home import cache_dir
from maxcode.tasks.model import Task, TestCase
from maxcode.types import (
    CppDetails,
    CppProfile,
    ErrorKind,
    Feedback,
    Metric,
    TestOutcome,
    TestStatus,
)

TIMING_FLOOR_S = 1e-4
WALL_PRECISION = 0.02
"""Wall metric: timed rounds go on until the speedup's 95% interval lies within this share of
its estimate (+-2%), or a cap below is reached."""
WALL_MIN_ROUNDS = 6
"""The fewest timed rounds: below six, no pair of order statistics covers a median with 95%."""
WALL_MIN_BATCH = 4
"""The fewest rounds added at a time (each batch is one sandbox start)."""
WALL_MAX_ROUNDS = 120
"""The most timed rounds of one evaluation."""
PROFILE_DUMP = "callgrind.out"
_PROFILE_DUMP_CHARS = 32 << 20
_DETAILED_FAILURES = 3
_STDERR_IN_DETAIL = 300


@dataclass
class _Programs:
    """Read-only folders holding each program's binary, visible inside the sandbox."""

    reference: Path
    candidate: Path


@dataclass
class _Runner:
    """Runs one program on every test, in one sandbox start, a fresh folder per test."""

    sandbox: Sandbox
    task: Task
    cpu: int | None
    verdict: Verdict
    limits: Limits = field(init=False)

    def __post_init__(self) -> None:
        self.limits = Limits(wall_s=self.task.timeout_s, memory_bytes=self.task.memory_mb << 20)

    @property
    def hidden(self) -> list[Path]:
        """Folders holding expected outputs, covered where the level shows the host's files."""
        return sorted({test.output_path.resolve().parent for test in self.task.tests})

    def note(self, results: list[SandboxResult], candidate: list[bool], timed: bool) -> None:
        """Integrity findings of the candidate's runs: processes left behind, and (on timed
        wall-clock runs) more CPU time than the task's budget over the run's wall time."""
        for result, is_candidate in zip(results, candidate):
            if is_candidate:
                note_run(self.verdict, self.task.cpus, result, timed)

    def run(self, plan: list[tuple[Path, TestCase]], programs: _Programs) -> list[SandboxResult]:
        """Run each (program folder, test) of the plan, in order, in one sandbox start."""
        runs = [
            Run(stdin=test.input_path, argv=(str(program / BINARY_NAME),)) for program, test in plan
        ]
        folders = [programs.reference, programs.candidate]
        results = self.sandbox.run_batch(
            None, runs, readonly=folders, limits=self.limits, cpu=self.cpu, hidden=self.hidden
        )
        candidate = [program == programs.candidate for program, _ in plan]
        self.note(results, candidate, timed=self.verdict.metric == "wall")
        return results

    def count_instructions(self, program: Path, tests: list[TestCase]) -> list[Counted]:
        """Each test under callgrind, the tests shared among this process's CPUs (a count
        does not depend on what else runs, unlike a time; ``_shares``), in order."""
        groups = _shares(tests, len(usable_cpus()))
        if len(groups) <= 1:
            return self._count_group(program, tests)
        counted: dict[int, Counted] = {}
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            done = pool.map(lambda group: self._count_group(program, group), groups)
            for group, results in zip(groups, done):
                counted.update({test.index: result for test, result in zip(group, results)})
        return [counted[test.index] for test in tests]

    def _count_group(self, program: Path, tests: list[TestCase]) -> list[Counted]:
        """The tests under callgrind, one sandbox start; counts come from a log the program
        cannot reach (valgrind keeps its log descriptor out of the program's hands)."""
        logs = [tempfile.TemporaryFile(prefix="maxcode-callgrind-") for _ in tests]  # noqa: SIM115
        try:
            limits = _valgrind_limits(self.task)
            argv = [
                *VALGRIND_ARGS,
                "--callgrind-out-file=/dev/null",
                "--log-fd=3",
                str(program / BINARY_NAME),
            ]
            runs = [
                Run(stdin=test.input_path, aux_fd=log.fileno()) for test, log in zip(tests, logs)
            ]
            results = self.sandbox.run_batch(
                argv, runs, readonly=[program], limits=limits, hidden=self.hidden
            )
            counted = []
            for result, log in zip(results, logs):
                log.seek(0)
                counted.append(count_instructions(result, log.read().decode(errors="replace")))
        finally:
            for log in logs:
                log.close()
        return counted


def _shares(tests: list[TestCase], cpus: int) -> list[list[TestCase]]:
    """The tests in at most ``cpus`` groups of about equal input bytes (the largest first,
    each to the lightest group): a program's work under callgrind grows with its input, and a
    test runs 20-60 times slower there than outside (``VALGRIND_SLOWDOWN``), so one CPU
    counting every test made most of an instructions evaluation's seconds."""
    groups: list[list[TestCase]] = [[] for _ in range(max(1, min(cpus, len(tests))))]
    loads = [0] * len(groups)
    sized = sorted(((test.input_path.stat().st_size, test) for test in tests), key=lambda p: -p[0])
    for size, test in sized:
        lightest = loads.index(min(loads))
        groups[lightest].append(test)
        loads[lightest] += size + 1
    return [group for group in groups if group]


def _valgrind_limits(task: Task) -> Limits:
    """A run under valgrind: its slowdown in time, its own mappings in memory."""
    return Limits(
        wall_s=max(30.0, task.timeout_s * VALGRIND_SLOWDOWN),
        memory_bytes=(task.memory_mb << 20) + (1 << 30),
    )


def _install(binary: Path) -> Path:
    """Copy a built binary into a fresh root-owned folder the sandbox mounts read-only, so a
    run can neither change the program for the next run nor touch the build cache."""
    folder = make_scratch("maxcode-bin-")
    os.chmod(folder, 0o755)
    shutil.copyfile(binary, folder / BINARY_NAME)
    os.chmod(folder / BINARY_NAME, 0o755)
    return folder


def evaluate_cpp(
    task: Task,
    candidate: str,
    *,
    metric: Metric = "wall",
    repeats: int | None = None,
    sandbox: Sandbox | None = None,
    cpu: int | None = None,
    profile: bool = False,
    reported: bool = False,
    precision: float | None = None,
    bar: float | None = None,
) -> Feedback:
    """Judge ``candidate`` (C++ source) against ``task``'s reference; timed runs are pinned
    to ``cpu`` (None: the last CPU this process may use). ``profile``: a correct candidate's
    feedback also says where its instructions go (``cpp_profile``). ``reported``: the speedup
    is reported, timed to a narrower interval (``REPORTED``); ``precision`` sets the interval
    instead; ``bar``: a screened candidate's timing stops once it is clearly below this reward
    (``wall_rule``)."""
    sandbox = sandbox or Sandbox()
    if metric == "instructions" and shutil.which("valgrind") is None:
        raise TaskError("--metric instructions needs valgrind (apt-get install valgrind)")
    digest = hashlib.sha256(candidate.encode()).hexdigest()
    base = Verdict(
        task.name,
        metric,
        sandbox.isolation,
        digest,
        len(task.tests),
        flags=isolation_flags(sandbox.isolation, sandbox.unsafe_ok),
    )
    # Both builds at once: they are independent and a machine has more than one core.
    with ThreadPoolExecutor(max_workers=2) as pool:
        building_reference = pool.submit(build_cpp, task.reference, task.compile_flags, sandbox)
        building_candidate = pool.submit(build_cpp, candidate, task.compile_flags, sandbox)
        reference_build, candidate_build = building_reference.result(), building_candidate.result()
    if not reference_build.ok or reference_build.binary is None:
        first = reference_build.diagnostics.strip().splitlines()[:1]
        raise TaskError(f"{task.origin}: the reference does not compile: {' '.join(first)}")
    if not candidate_build.ok or candidate_build.binary is None:
        return _compile_failure(base, candidate_build)
    programs = _Programs(_install(reference_build.binary), _install(candidate_build.binary))
    try:
        # A task whose budget is several CPUs is timed unpinned (reference and candidate alike).
        pin = (timing_cpu() if cpu is None else cpu) if task.cpus == 1 else None
        # The untimed correctness runs on one other CPU, not beside a window timed on ``pin``.
        checks_on = min(CpuTurn(pin).elsewhere, default=pin)
        runner = _Runner(sandbox, task, checks_on, base)
        outcomes = _correctness_round(runner, task, programs)
        runner.cpu = pin
        passed = sum(outcome.status == "passed" for outcome in outcomes)
        if passed < len(task.tests):
            return _wrong(runner, outcomes, passed, candidate_build)
        if metric == "wall":
            wanted = repeats or task.repeats
            with cpu_turn(pin):
                rule = wall_rule(reported, precision, bar)
                verdict = _measure_wall(runner, programs, outcomes, wanted, rule)
        else:
            verdict = _measure_instructions(runner, programs, outcomes, reference_build.key)
        if profile and verdict.correct:
            started = time.perf_counter()
            found = _profile(task, candidate, sandbox, verdict)
            seconds = time.perf_counter() - started
            details = CppDetails(profile=found)
            verdict = verdict.model_copy(update={"cpp": details, "profile_seconds": seconds})
        return verdict
    finally:
        shutil.rmtree(programs.reference, ignore_errors=True)
        shutil.rmtree(programs.candidate, ignore_errors=True)


def _profile(task: Task, candidate: str, sandbox: Sandbox, verdict: Feedback) -> CppProfile | None:
    """The candidate, built with debug information, once under callgrind with cache simulation
    on its costliest test; None when valgrind or the debug build is missing."""
    if shutil.which("valgrind") is None:
        return None
    flags = task.compile_flags if "-g" in task.compile_flags else (*task.compile_flags, "-g")
    build = build_cpp(candidate, flags, sandbox)
    if not build.ok or build.binary is None:
        return None
    costs = verdict.candidate_costs or [0.0]
    test = task.tests[max(range(len(costs)), key=costs.__getitem__)]
    program = _install(build.binary)
    workdir = make_scratch("maxcode-profile-")
    try:
        limits = _valgrind_limits(task)
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--dump-instr=no",
            "--dump-line=yes",
            "--cache-sim=yes",
            "--compress-strings=no",
            "--compress-pos=no",
            f"--callgrind-out-file={PROFILE_DUMP}",
            str(program / BINARY_NAME),
        ]
        hidden = sorted({case.output_path.resolve().parent for case in task.tests})
        sandbox.run(
            argv,
            scratch=workdir,
            stdin=test.input_path,
            readonly=[program],
            limits=limits,
            hidden=hidden,
        )
        dump = workdir / PROFILE_DUMP
        if not dump.is_file():
            return None
        with open(dump, encoding="utf-8", errors="replace") as handle:
            text = handle.read(_PROFILE_DUMP_CHARS)
        return cpp_profile(parse_callgrind(text), candidate, SOURCE_NAME)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(program, ignore_errors=True)


def _correctness_round(runner: _Runner, task: Task, programs: _Programs) -> list[TestOutcome]:
    """The reference, then the candidate, over every test; the reference must pass (a task
    error otherwise: nothing the candidate does can reach the reference's runs). The candidate's
    first timeout decides the verdict: the sandbox's init runs no test after it (a program
    that hangs would cost every other test's limit too), and the outcomes end there."""
    expected = [test.output_path.read_bytes() for test in task.tests]
    results = runner.run([(programs.reference, test) for test in task.tests], programs)
    for test, want, result in zip(task.tests, expected, results):
        reference = _outcome(test.index, result, want, runner)
        if reference.status != "passed":
            why = reference.detail.splitlines()[0] if reference.detail else ""
            raise TaskError(
                f"{task.origin}: the reference fails its own test {test.index}: "
                f"{reference.status}: {why}"
            )
    results = runner.run([(programs.candidate, test) for test in task.tests], programs)
    outcomes = []
    for test, want, result in zip(task.tests, expected, results):
        outcomes.append(_outcome(test.index, result, want, runner))
        if outcomes[-1].status == "timeout":  # the sandbox's init ran no test after it
            break
    return outcomes


def wall_rule(
    reported: bool = False, precision: float | None = None, bar: float | None = None
) -> Precision:
    """When a wall timing stops: at ``WALL_PRECISION`` for a screen; a reported speedup at half
    that, with ``REPORTED`` times the caps (a twice as narrow interval takes about four times
    the rounds); ``precision`` sets the target instead, its caps scaled alike; ``bar``: a
    screen stops once the interval lies wholly below it."""
    if precision is None:
        precision = WALL_PRECISION / math.sqrt(REPORTED) if reported else WALL_PRECISION
    scale = (WALL_PRECISION / precision) ** 2
    return Precision(
        precision,
        most=max(WALL_MIN_ROUNDS, round(WALL_MAX_ROUNDS * scale)),
        budget_s=timing_budget_s(scale),
        least_batch=WALL_MIN_BATCH,
        bar=bar,
    )


def _measure_wall(
    runner: _Runner, programs: _Programs, outcomes: list[TestOutcome], repeats: int, rule: Precision
) -> Feedback:
    """Timed rounds until ``rule`` stops them (``harness.measurement``): the speedup's interval is
    narrow, the candidate clearly below a screen's bar, or a cap is hit.

    A round runs every test with reference and candidate back to back, which one goes first
    alternating, pinned to one CPU, so a load that lasts a round hits both alike; the round's
    costs are each program's time summed over the tests. Rounds come in batches, one sandbox
    start each: at least ``max(repeats, WALL_MIN_ROUNDS)``, then as many as the interval's
    width says are still needed. What the budget counts is the timing's own cost, not only the
    programs' time: the suite's echo task (about 1 ms a run by the init's clock) costs 1.6 ms a
    run in all here, and counting the programs' time alone let it run every round."""
    task = runner.task
    expected = {test.index: test.output_path.read_bytes() for test in task.tests}
    samples: dict[Path, dict[int, list[float]]] = {programs.reference: {}, programs.candidate: {}}
    measurement = Measurement(floor=TIMING_FLOOR_S * len(task.tests))

    def take(batch: int) -> Feedback | None:
        rounds = measurement.rounds
        plan: list[tuple[Path, TestCase]] = []
        for round_number in range(rounds, rounds + batch):
            for position, test in enumerate(task.tests):
                pair = [programs.reference, programs.candidate]
                if (round_number + position) % 2:
                    pair.reverse()
                plan += [(program, test) for program in pair]
        totals = {programs.reference: [0.0] * batch, programs.candidate: [0.0] * batch}
        for number, ((program, test), result) in enumerate(zip(plan, runner.run(plan, programs))):
            outcome = _outcome(test.index, result, expected[test.index], runner)
            in_batch = number // (2 * len(task.tests))
            if outcome.status != "passed":
                if program == programs.reference:
                    where = f"timed run {rounds + in_batch + 1}"
                    return _reference_lost(runner, outcomes, outcome, where)
                return _failed_timed_run(runner, outcomes, outcome, rounds + in_batch)
            samples[program].setdefault(test.index, []).append(result.wall_s)
            totals[program][in_batch] += result.wall_s
        for reference_s, candidate_s in zip(totals[programs.reference], totals[programs.candidate]):
            measurement.add(reference_s, candidate_s)
        return None

    ended = time_rounds(take, measurement, rule, first=max(repeats, WALL_MIN_ROUNDS))
    if ended is not None:
        return ended
    reference_costs = [_median(samples[programs.reference][test.index]) for test in task.tests]
    candidate_costs = [_median(samples[programs.candidate][test.index]) for test in task.tests]
    if sum(candidate_costs) < 10 * TIMING_FLOOR_S * len(task.tests):
        runner.verdict.flag(
            "timing-floor",
            "the candidate's runs are near the timing floor; prefer --metric instructions",
        )
    interval = measurement.interval()
    return _correct(
        runner, outcomes, reference_costs, candidate_costs, interval, repeats=measurement.rounds
    )


def _correct(
    runner: _Runner,
    outcomes: list[TestOutcome],
    reference_costs: list[float],
    candidate_costs: list[float],
    interval: SpeedupInterval | None = None,
    repeats: int = 0,
) -> Feedback:
    """The verdict on a candidate that passed every run: its costs and speedup (the policy
    takes the reward when a void finding was made on the way). Timed: the speedup is the
    paired rounds' estimate, with their interval; counted: the ratio of the costs, exactly."""
    reference_cost, candidate_cost = sum(reference_costs), sum(candidate_costs)
    if interval is None:
        interval = exact(reference_cost / max(candidate_cost, TIMING_FLOOR_S))
    speedup = interval.estimate
    runner.verdict.implausible(speedup)
    return runner.verdict.make(
        compiled=True,
        correct=True,
        speedup=speedup,
        speedup_interval=(interval.low, interval.high),
        reference_cost=reference_cost,
        candidate_cost=candidate_cost,
        tests_passed=len(outcomes),
        tests=outcomes,
        reference_costs=reference_costs,
        candidate_costs=candidate_costs,
        repeats=repeats,
    )


def _measure_instructions(
    runner: _Runner, programs: _Programs, outcomes: list[TestOutcome], reference_key: str
) -> Feedback:
    task = runner.task
    expected = {test.index: test.output_path.read_bytes() for test in task.tests}
    reference_counts = {
        test.index: _cached_reference_count(reference_key, test) for test in task.tests
    }
    uncounted = [test for test in task.tests if reference_counts[test.index] is None]
    for test, counted in zip(uncounted, runner.count_instructions(programs.reference, uncounted)):
        outcome = _outcome(test.index, counted.result, expected[test.index], runner)
        if counted.instructions is None or outcome.status != "passed":
            raise TaskError(
                f"{task.origin}: the reference failed test {test.index} under callgrind: "
                f"{outcome.status}: {outcome.detail or counted.lost or 'no instruction count'}"
            )
        _store_reference_count(reference_key, test, counted.instructions)
        reference_counts[test.index] = counted.instructions
    candidate_costs: list[float] = []
    tests = list(task.tests)
    for test, counted in zip(tests, runner.count_instructions(programs.candidate, tests)):
        runner.note([counted.result], [True], timed=False)
        outcome = _outcome(test.index, counted.result, expected[test.index], runner)
        if outcome.status != "passed":
            return _failed_timed_run(runner, outcomes, outcome, 0)
        if counted.instructions is None:
            # Misbehaviour of the candidate, not of the task: its work was not all counted.
            runner.verdict.flag("untracked", f"test {test.index}: {counted.lost}")
            candidate_costs.append(float(reference_counts[test.index] or 0))
            continue
        candidate_costs.append(float(counted.instructions))
    reference_costs = [float(reference_counts[test.index] or 0) for test in task.tests]
    return _correct(runner, outcomes, reference_costs, candidate_costs)


def _outcome(index: int, result: SandboxResult, expected: bytes, runner: _Runner) -> TestOutcome:
    def outcome(status: TestStatus, detail: str = "") -> TestOutcome:
        return TestOutcome(
            index=index,
            status=status,
            detail=detail,
            signal=result.signal,
            exit_code=result.exit_code,
            seconds=result.wall_s,
        )

    if result.limit_hit == "wall":
        return outcome("timeout", f"no answer within {runner.limits.wall_s:g} s (killed)")
    if result.limit_hit == "cpu":
        return outcome("timeout", "CPU time limit exceeded (killed)")
    if result.limit_hit == "memory":
        limit = f"memory limit ({runner.task.memory_mb} MiB) exceeded"
        return outcome("memory_limit", limit + _stderr_excerpt(result))
    if result.limit_hit == "output":
        return outcome(
            "output_limit", f"wrote more than {runner.limits.file_size_bytes >> 20} MiB (killed)"
        )
    if result.signal is not None:
        name = _signal_name(result.signal)
        return outcome(
            "runtime_error", f"killed by signal {result.signal} ({name}){_stderr_excerpt(result)}"
        )
    if result.exit_code != 0:
        return outcome("runtime_error", f"exit code {result.exit_code}{_stderr_excerpt(result)}")
    comparison = compare_output(
        expected,
        result.stdout,
        abs_tol=runner.task.float_abs_tol,
        rel_tol=runner.task.float_rel_tol,
    )
    if not comparison.matches:
        return outcome("wrong_answer", comparison.detail)
    return outcome("passed")


def _compile_failure(base: Verdict, build: CompileResult) -> Feedback:
    first_error = next(
        (line for line in build.diagnostics.splitlines() if "error" in line),
        build.diagnostics.splitlines()[0] if build.diagnostics else "compilation failed",
    )
    return base.failed(
        "compile_error",
        first_error.strip(),
        compiled=False,
        tests_passed=0,
        compile_output=build.diagnostics,
    )


def _wrong(
    runner: _Runner, outcomes: list[TestOutcome], passed: int, build: CompileResult
) -> Feedback:
    outcomes = _hide_held_out(runner.task, outcomes)
    # A shown failure first: its detail is what the next attempt can act on.
    failures = sorted(
        (outcome for outcome in outcomes if outcome.status != "passed"),
        key=lambda outcome: outcome.hidden,
    )
    first = failures[0]
    detailed = {outcome.index for outcome in failures[:_DETAILED_FAILURES]}
    shown = [
        outcome
        if outcome.index in detailed or outcome.status == "passed"
        else outcome.model_copy(update={"detail": ""})
        for outcome in outcomes
    ]
    if any(outcome.hidden for outcome in failures):
        runner.verdict.flag("held-out", "a hidden test failed")
    return runner.verdict.failed(
        cast(ErrorKind, first.status),
        _failure_message(first),
        tests_passed=passed,
        tests=shown,
        compile_output=build.diagnostics,
    )


def _failed_timed_run(
    runner: _Runner, outcomes: list[TestOutcome], failure: TestOutcome, round_number: int
) -> Feedback:
    """Correct on the first run, wrong on a later one: no reward, and a flag."""
    (failure,) = _hide_held_out(runner.task, [failure])
    which = "a hidden test" if failure.hidden else f"test {failure.index}"
    runner.verdict.flag(
        "nondeterministic",
        f"{which} passed once and failed on timed run {round_number + 1} ({failure.status})",
    )
    shown = [failure if outcome.index == failure.index else outcome for outcome in outcomes]
    return runner.verdict.failed(
        cast(ErrorKind, failure.status),
        _failure_message(failure) + " (on a repeated run)",
        tests_passed=len(outcomes) - 1,
        tests=shown,
    )


def _reference_lost(
    runner: _Runner, outcomes: list[TestOutcome], failure: TestOutcome, where: str
) -> Feedback:
    """The reference passed its tests but failed a later run: nothing was measured. Not a task
    error, which would end a search over one candidate's evaluation: a void verdict."""
    runner.verdict.flag(
        "evidence",
        f"the reference failed test {failure.index} on {where} ({failure.status}); "
        "nothing could be measured",
    )
    return runner.verdict.unmeasured(True, len(outcomes), tests=outcomes)


def _hide_held_out(task: Task, outcomes: list[TestOutcome]) -> list[TestOutcome]:
    """Held-out tests keep their status but lose every detail (expected output, stderr)."""
    hidden = {test.index for test in task.tests if test.held_out}
    return [
        outcome.model_copy(update={"detail": "", "hidden": True, "signal": None, "exit_code": None})
        if outcome.index in hidden
        else outcome
        for outcome in outcomes
    ]


def _failure_message(outcome: TestOutcome) -> str:
    if outcome.hidden:
        return "a hidden test failed"
    return f"test {outcome.index}: {outcome.detail}"


def _median(samples: list[float]) -> float:
    return max(statistics.median(samples), TIMING_FLOOR_S)


def _stderr_excerpt(result: SandboxResult) -> str:
    text = result.stderr.strip()
    if not text:
        return ""
    if len(text) > _STDERR_IN_DETAIL:
        text = "…" + text[-_STDERR_IN_DETAIL:]
    return f"; stderr: {text}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def _count_path(reference_key: str, test: TestCase) -> Path:
    digest = hashlib.sha256(test.input_path.read_bytes()).hexdigest()
    return cache_dir("instructions") / f"{reference_key}-{digest}.json"


def _cached_reference_count(reference_key: str, test: TestCase) -> int | None:
    path = _count_path(reference_key, test)
    if not path.is_file():
        return None
    return int(json.loads(path.read_text())["instructions"])


def _store_reference_count(reference_key: str, test: TestCase, count: int) -> None:
    path = _count_path(reference_key, test)
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps({"instructions": count}))
    os.replace(staging, path)
