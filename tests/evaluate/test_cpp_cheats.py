"""C++ candidates that try to earn a reward without doing the work faster earn none.

Each fixture in ``tests/fixtures/cpp/cheats/`` answers correctly with the reference's own
algorithm and games one rule of the harness (see the README there). A cheat is closed when its
verdict is void (``suspect``, reward 0, the finding's category named) or when it is measured at
what it really costs. Costs are asserted under ``--metric instructions`` only, where a count is
the same on every run, so these tests cannot fail on timing noise.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from maxcode.harness.build import BINARY_NAME, build_cpp
from maxcode.harness.integrity import Verdict
from maxcode.harness.runs import CPU_SLACK
from maxcode.harness.sandbox import Sandbox, SandboxResult, UnsafeIsolation
from maxcode.harness.turns import timing_cpu
from maxcode.kinds.cpp.evaluate_cpp import _install, _Programs, _Runner, evaluate_cpp
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import EXAMPLES, FIXTURES, write_task

CHEATS = FIXTURES / "cheats"
LEVELS = ["bwrap", "unshare"]
"""Every level maxcode accepts without an explicit opt-in."""

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")


@pytest.fixture(scope="module")
def small_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pair_count_quadratic with its smaller tests: quick under callgrind, same program."""
    folder = tmp_path_factory.mktemp("cheat-task") / "pair_count"
    source = EXAMPLES / "pair_count_quadratic"
    (folder / "tests").mkdir(parents=True)
    shutil.copy(source / "reference.cpp", folder / "reference.cpp")
    (folder / "task.toml").write_text('name = "pair_count"\nkind = "cpp"\nrepeats = 2\n')
    for index in range(5):
        for kind in ("input", "output"):
            name = f"{kind}.{index}.txt"
            shutil.copy(source / "tests" / name, folder / "tests" / name)
    return folder


def _judge(task_folder: Path, fixture: str, level: str, metric: str = "instructions") -> Feedback:
    task = load_task(str(task_folder))
    source = (CHEATS / fixture).read_text()
    return evaluate_cpp(task, source, metric=metric, sandbox=Sandbox(level))  # type: ignore[arg-type]


def _counted_in_full(result: Feedback) -> None:
    """Void, or charged at least the reference's instructions (the cheat runs the reference's
    own algorithm plus its tricks): a comparison of counts, the same on every run."""
    if result.suspect is not None:
        assert result.speedup == 0.0 and result.claimed_speedup is not None
        return
    assert result.metric == "instructions"
    assert result.candidate_cost is not None and result.reference_cost is not None
    assert result.candidate_cost >= result.reference_cost


@needs_valgrind
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fixture", ["fork_exec.cpp", "fork_exec_quiet.cpp"])
def test_work_in_a_child_process_is_counted(small_task: Path, fixture: str, level: str) -> None:
    result = _judge(small_task, fixture, level)
    assert result.correct
    _counted_in_full(result)


@needs_valgrind
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fixture", ["exec_only.cpp", "work_then_exec.cpp"])
def test_an_exec_that_loses_counts_is_void_not_a_task_error(
    small_task: Path, fixture: str, level: str
) -> None:
    result = _judge(small_task, fixture, level)
    assert result.correct and result.speedup == 0.0
    assert result.suspect is not None and result.suspect.startswith("untracked:")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("metric", ["wall", "instructions"])
def test_a_process_left_running_voids_the_result(small_task: Path, level: str, metric: str) -> None:
    if metric == "instructions" and shutil.which("valgrind") is None:
        pytest.skip("needs valgrind")
    result = _judge(small_task, "daemon.cpp", level, metric)
    assert result.suspect is not None and result.suspect.startswith("processes:")
    assert result.speedup == 0.0


def _installed(fixture: str) -> Path:
    build = build_cpp((CHEATS / fixture).read_text(), ("-O2", "-std=c++17"), Sandbox("bwrap"))
    assert build.ok and build.binary is not None, build.diagnostics
    return _install(build.binary)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    "fixture", ["sysv_memo.cpp", "posix_memo.cpp", "file_memo.cpp", "read_expected.cpp"]
)
def test_timed_rounds_share_no_state_and_show_no_expected_output(
    small_task: Path, fixture: str, level: str
) -> None:
    """The timed rounds' own path (one sandbox start, the same test again and again): each
    fixture says on stderr when its memo or the expected output was found; no run may say so."""
    task = load_task(str(small_task))
    program = _installed(fixture)
    try:
        verdict = Verdict(task.name, "wall", level, "", len(task.tests))
        runner = _Runner(Sandbox(level), task, timing_cpu(), verdict)  # type: ignore[arg-type]
        plan = [(program, test) for _ in range(3) for test in task.tests[3:]]
        results = runner.run(plan, _Programs(program, program))
    finally:
        shutil.rmtree(program, ignore_errors=True)
    assert all(result.ok for result in results), [
        (result.exit_code, result.signal, result.limit_hit, result.wall_s, result.stderr)
        for result in results
    ]
    said = [result.stderr for result in results if result.stderr.strip()]
    assert said == []


def test_read_expected_finds_the_output_where_nothing_covers_it(small_task: Path) -> None:
    """The control for the test above: run outside a sandbox, the fixture does find the
    expected output (so its silence in the sandbox is the cover's doing)."""
    program = _installed("read_expected.cpp")
    test = load_task(str(small_task)).tests[3]
    try:
        with test.input_path.open("rb") as stdin:
            run = subprocess.run(
                [str(program / BINARY_NAME)], stdin=stdin, capture_output=True, timeout=60
            )
    finally:
        shutil.rmtree(program, ignore_errors=True)
    assert b"expected output found" in run.stderr
    assert run.stdout == test.output_path.read_bytes()


@pytest.mark.parametrize("fixture", ["affinity_threads.cpp", "plain_threads.cpp"])
def test_more_cpu_than_the_budget_is_void_when_it_ran_in_parallel(fixture: str) -> None:
    """Whether the threads overlapped is the scheduler's choice on a shared machine, so this
    asserts the verdict only: correct, and when void, for the CPU budget. The judgement itself
    is tested on fixed numbers below, the accounting on fixed CPU work."""
    result = _judge(EXAMPLES / "pair_count_quadratic", fixture, "bwrap", "wall")
    assert result.correct
    if result.suspect is not None:
        assert result.suspect.startswith("parallel:") and result.speedup == 0.0


BURN = """#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
// Each worker spends 0.1 s of its own CPU time, however it is scheduled.
static void burn() {
    timespec used{};
    while (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used) == 0 && used.tv_sec == 0 &&
           used.tv_nsec < 100000000L) {
    }
}
static void* thread_main(void*) {
    burn();
    return nullptr;
}
int main() {
    int orphan_done[2];
    if (pipe(orphan_done) != 0) return 1;
    pid_t child = fork();
    if (child == 0) {
        burn();
        _exit(0);
    }
    if (fork() == 0) {
        if (fork() == 0) {
            burn();
            _exit(write(orphan_done[1], "x", 1) == 1 ? 0 : 1);
        }
        _exit(0);
    }
    pthread_t thread;
    pthread_create(&thread, nullptr, thread_main, nullptr);
    burn();
    pthread_join(thread, nullptr);
    waitpid(child, nullptr, 0);
    char byte;
    return read(orphan_done[0], &byte, 1) == 1 ? 0 : 1;
}
"""


def test_cpu_time_of_threads_children_and_orphans_is_all_counted() -> None:
    """The sandbox reports the CPU time of every process and thread of a run (what the CPU
    budget is judged on): four workers (the main thread, a thread, a child, an orphan) each
    spend 0.1 s by their own CPU clocks, so the run has used at least 0.4 s of CPU time."""
    build = build_cpp(BURN, ("-O2", "-std=c++17", "-pthread"), Sandbox("bwrap"))
    assert build.ok and build.binary is not None, build.diagnostics
    program = _install(build.binary)
    try:
        result = Sandbox("bwrap").run([str(program / BINARY_NAME)], readonly=[program])
    finally:
        shutil.rmtree(program, ignore_errors=True)
    assert result.ok, result.stderr
    assert result.cpu_s >= 0.4, result.cpu_s


def test_the_cpu_budget_is_judged_on_cpu_time_against_wall_time() -> None:
    task = load_task(str(EXAMPLES / "pair_count_quadratic"))
    verdict = Verdict(task.name, "wall", "bwrap", "", len(task.tests))
    runner = _Runner(Sandbox("bwrap"), task, None, verdict)

    def result(cpu_s: float, wall_s: float) -> SandboxResult:
        return SandboxResult(0, None, None, wall_s, cpu_s, 0, b"", "", "bwrap")

    runner.note([result(0.5 * CPU_SLACK, 0.5), result(2.0, 0.5)], [False, True], timed=False)
    assert verdict.flags == []
    runner.note([result(0.5, 0.5), result(0.5 * CPU_SLACK, 0.5)], [False, True], timed=True)
    assert verdict.flags == []
    runner.note([result(0.1, 0.5), result(1.9, 1.0)], [False, True], timed=True)
    assert len(verdict.flags) == 1 and verdict.flags[0].startswith("parallel:")


def test_a_task_with_a_larger_cpu_budget_allows_it(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "t", toml='name = "sum"\nkind = "cpp"\ncpus = 4\n')
    task = load_task(str(folder))
    assert task.cpus == 4
    verdict = Verdict(task.name, "wall", "bwrap", "", len(task.tests))
    runner = _Runner(Sandbox("bwrap"), task, None, verdict)
    runner.note([SandboxResult(0, None, None, 1.0, 3.5, 0, b"", "", "bwrap")], [True], timed=True)
    assert verdict.flags == []


def test_rlimits_is_refused_without_the_opt_in_and_marked_with_it(small_task: Path) -> None:
    with pytest.raises(UnsafeIsolation, match="--unsafe-isolation"):
        Sandbox("rlimits")
    task = load_task(str(small_task))
    source = (CHEATS / "sysv_memo.cpp").read_text()
    result = evaluate_cpp(task, source, sandbox=Sandbox("rlimits", unsafe_ok=True), repeats=1)
    assert any(flag.startswith("unsafe-isolation:") for flag in result.flags)
