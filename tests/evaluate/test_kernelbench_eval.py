"""The KernelBench evaluator on the CPU: real sandboxed workers, real torch, hostile candidates.

Every cheating candidate in ``tests/fixtures/kernelbench/cheats`` must earn nothing: it is
scored wrong, or its score is what it really costs, and the finding is in ``flags``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from maxcode.harness.integrity import void_findings
from maxcode.harness.turns import CpuTurn, timing_cpu
from maxcode.kinds import evaluate_task
from maxcode.kinds.kernelbench.schedule import Round
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import (
    REPO,
    ROW_BY_ROW,
    SUITE_ROUNDS,
    make_hermetic,
    processes_of_this_test,
    run_maxcode,
    write_problem,
)

pytest.importorskip("torch")

CHEATS = REPO / "tests" / "fixtures" / "kernelbench" / "cheats"
PROBLEM = CHEATS / "problem.py"
QUICK = {"repeats": 20}


def judge(candidate: str | Path, problem: Path = PROBLEM, **options: object) -> Feedback:
    source = candidate.read_text() if isinstance(candidate, Path) else candidate
    task = load_task(str(problem), scale=float(options.pop("scale", 1.0)))  # type: ignore[arg-type]
    if "timeout_s" in options:
        task = dataclasses.replace(task, timeout_s=float(options.pop("timeout_s")))  # type: ignore[arg-type]
    return evaluate_task(task, source, **{**QUICK, **options})  # type: ignore[arg-type]


def model_new(forward: str, imports: str = "") -> str:
    return (
        f"import torch\nimport torch.nn as nn\n{imports}\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, *args):\n        super().__init__()\n\n"
        f"    def forward(self, x):\n        {forward}\n"
    )


@dataclasses.dataclass
class Judged:
    """One evaluation and the timing schedules it made."""

    feedback: Feedback
    schedules: list[Round]


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Judged:
    """``honest.py`` judged once with the defaults (no profile), read by the tests that check
    different parts of the same verdict: its timing, its roofline, its lack of profiles."""
    from maxcode.kinds.kernelbench import evaluator

    schedules: list[Round] = []

    class Recorded(Round):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            schedules.append(self)

    with pytest.MonkeyPatch.context() as patch:
        make_hermetic(patch, tmp_path_factory.mktemp("maxcode-home"))
        patch.setattr(evaluator, "Round", Recorded)
        return Judged(judge(CHEATS / "honest.py"), schedules)


def test_an_honest_candidate_is_correct_and_timed_against_eager(honest: Judged) -> None:
    feedback, schedules = honest.feedback, honest.schedules
    assert feedback.correct and feedback.compiled, feedback.error
    assert feedback.tests_passed == feedback.tests_total == 3
    assert feedback.speedup > 0 and feedback.error is None
    assert void_findings(feedback.flags) == []
    assert feedback.isolation == "bwrap" and feedback.device == "cpu"
    reference, candidate = (
        feedback.kernelbench.timings["reference"],
        feedback.kernelbench.timings["candidate"],
    )
    assert reference.trials == candidate.trials == 20
    assert reference.median_s > 0 and candidate.median_s > 0
    assert reference.host_s is not None and candidate.host_s is not None
    # The paired estimate: reference cost / candidate cost, inside its 95% interval.
    assert feedback.reference_cost == pytest.approx(reference.median_s)
    assert feedback.candidate_cost is not None
    assert feedback.speedup == pytest.approx(feedback.reference_cost / feedback.candidate_cost)
    assert feedback.speedup_interval is not None
    low, high = feedback.speedup_interval
    assert 0 < low <= feedback.speedup <= high
    assert (
        "compile" not in feedback.kernelbench.timings
        and feedback.kernelbench.speedup_vs_compile is None
    )
    # The harness's own cost per call, measured with an identity model, is below both.
    harness = feedback.kernelbench.timings["harness"]
    assert 1 <= harness.trials <= 20 and 0 < harness.median_s < reference.median_s
    # Both workers were alive together and took turns: 20 calls as ten chunks of 2 per side
    # (a ninth of the calls at most: a warm-up pair and eight more at least), reference chunk
    # n before candidate chunk n, then the reference's identity model.
    (schedule,) = schedules
    timed = [(side, chunk) for side, phase, chunk in schedule.turns.order if phase == "K"]
    assert timed == [(side, n) for n in range(10) for side in ("reference", "candidate")]
    assert [len(times) for times in schedule.turns.times["candidate"]] == [2] * 10
    assert {phase for _, phase, _ in schedule.turns.order} == {"K", "O"}
    # Where the evaluation's seconds went, phase by phase.
    assert {"start", "startup", "checks", "timing", "finish", "judging"} <= set(feedback.phases)
    assert all(seconds >= 0 for seconds in feedback.phases.values())
    # Within the timing window: the calls' own seconds (those the schedule received, both
    # sides), making their inputs and sending their outputs, together no more than the window
    # (the candidate's last chunk may free its outputs just after the window closed).
    phases = feedback.phases
    received = sum(sum(times) for side in schedule.turns.times.values() for times in side)
    assert phases["calls"] == pytest.approx(received, abs=2e-4)
    assert phases["inputs"] > 0 and phases["outputs"] > 0
    assert phases["calls"] + phases["inputs"] + phases["outputs"] <= phases["timing"] + 0.05


def test_maxcode_eval_json_has_the_contract_fields_and_the_compile_baseline(
    tmp_path: Path,
) -> None:
    # A forward that is one matrix product: torch.compile hands it to aten's own kernel and
    # builds no C++ of its own, a fraction of the seconds a fused tanh and scale costs (an
    # inductor kernel built in the sandbox: the rules proposer's KernelBench search test).
    problem = write_problem(tmp_path, "return x @ x.T")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(model_new("return torch.mm(x, x.t())"))
    result = run_maxcode("eval", str(problem), str(candidate), "--json", "--repeats", "10")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    for key in (
        "compiled",
        "correct",
        "speedup",
        "metric",
        "reference_cost",
        "candidate_cost",
        "tests_passed",
        "tests_total",
        "error",
        "flags",
    ):
        assert key in printed
    assert printed["correct"] is True and printed["metric"] == "wall"
    assert printed["kernelbench"]["timings"]["compile"]["trials"] > 0
    assert printed["kernelbench"]["speedup_vs_compile"] > 0
    assert printed["kernelbench"]["shape_scale"] == 1.0
    # A reported number: fresh worker pairs sampled the bias of one pair of processes (as
    # many as the suite's MAXCODE_MOST_ROUNDS allows).
    assert (
        printed["kernelbench"]["rounds"] == SUITE_ROUNDS and printed["repeats"] == 10 * SUITE_ROUNDS
    )
    assert len(printed["kernelbench"]["per_round"]) == SUITE_ROUNDS
    each = {"speedup", "interval", "reference_s", "candidate_s"}
    assert all(set(done) == each for done in printed["kernelbench"]["per_round"])
    # Every timed round carries both sides' medians (present, whatever their values).
    sides = [
        (done["reference_s"], done["candidate_s"]) for done in printed["kernelbench"]["per_round"]
    ]
    assert all(isinstance(ref, float) and isinstance(cand, float) for ref, cand in sides)


def test_the_compile_baseline_is_measured_once_per_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.compile of the reference is the reference's alone: a task's first clean round
    times it, later evaluations show the kept timing and their own speedup over it, and their
    reference runs no compiled calls."""
    from maxcode.kinds.kernelbench import evaluator

    make_hermetic(monkeypatch, tmp_path / "home")
    schedules: list[Round] = []

    class Recorded(Round):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            schedules.append(self)

    monkeypatch.setattr(evaluator, "Round", Recorded)
    # Shapes of its own: measurements per task are kept in the process too.
    problem = write_problem(tmp_path, "return x @ x.T", inputs="[torch.randn(24, 40)]")
    source = model_new("return torch.mm(x, x.t())")
    first, second = (judge(source, problem, compile_baseline=True) for _ in range(2))
    timed = [{phase for _, phase, _ in schedule.turns.order} for schedule in schedules]
    assert timed == [{"K", "O", "C"}, {"K", "O"}]
    for feedback in (first, second):
        assert feedback.correct and feedback.suspect is None, (feedback.error, feedback.flags)
        assert (
            feedback.kernelbench.speedup_vs_compile is not None
            and feedback.kernelbench.speedup_vs_compile > 0
        )
    assert second.kernelbench.timings["compile"] == first.kernelbench.timings["compile"]
    ratio = (
        first.kernelbench.timings["compile"].median_s
        / first.kernelbench.timings["reference"].median_s
    )
    assert second.kernelbench.speedup_vs_compile == pytest.approx(ratio * second.speedup)


@pytest.mark.parametrize(
    ("fixture", "wrong_because", "flag"),
    [
        ("cache_output.py", "seed 0", None),
        (
            "mutate_input.py",
            "an input was changed by the call",
            "inputs: the candidate changed its inputs",
        ),
        ("input_view.py", "shares memory with an input", "aliasing:"),
        ("zeros.py", "values outside tolerance", None),
        ("patch_allclose.py", "values outside tolerance", None),
        ("wrong_when_timed.py", "timed call", "caching:"),
    ],
)
def test_cheating_candidates_are_scored_wrong(
    fixture: str, wrong_because: str, flag: str | None
) -> None:
    feedback = judge(CHEATS / fixture)
    assert not feedback.correct and feedback.speedup == 0.0
    assert feedback.error is not None and wrong_because in feedback.error.message
    if flag is not None:
        assert any(found.startswith(flag) for found in feedback.flags), feedback.flags


@pytest.mark.parametrize("fixture", ["patch_clock.py", "slow_reference.py"])
def test_cheats_on_the_clock_and_the_reference_gain_nothing(fixture: str) -> None:
    """Patching the clock, slowing the reference's ops: the candidate is correct, so it is
    scored, at what it really costs (no better than honest)."""
    feedback = judge(CHEATS / fixture)
    assert feedback.correct, feedback.error
    # Each does at least the reference's work, so honest timing cannot make it much faster:
    # the 95% interval of the paired estimate reaches below 1.5x (a bound far from both the
    # patched clock's claim and a slowed reference's 20x; one draw of noise cannot cross it).
    assert feedback.speedup_interval is not None, feedback.kernelbench.timings
    assert feedback.suspect is not None or feedback.speedup_interval[0] < 1.5, (
        feedback.speedup_interval,
        feedback.kernelbench.timings,
    )


def test_a_cache_keyed_on_input_addresses_gains_nothing() -> None:
    """Every call gets inputs of its own: when the allocator reuses an address, the cached
    answer is for other inputs and is caught (on a check seed or a timed call); when it does
    not, the cache never hits and the candidate pays for every call."""
    feedback = judge(CHEATS / "cache_by_pointer.py")
    if feedback.correct and feedback.suspect is None:
        assert feedback.speedup_interval is not None
        assert feedback.speedup_interval[0] < 1.5, (
            feedback.speedup_interval,
            feedback.kernelbench.timings,
        )


def test_a_candidate_that_patches_the_harness_clock_is_caught_by_host_time() -> None:
    feedback = judge(CHEATS / "patch_harness_clock.py")
    assert any(flag.startswith("timing: in-process timings disagree") for flag in feedback.flags)
    # A void finding: no reward, the verdict says why, the claim is kept for the record.
    assert feedback.correct and feedback.speedup == 0.0
    assert feedback.suspect is not None and feedback.suspect.startswith("timing:")
    assert feedback.claimed_speedup is not None and feedback.claimed_speedup > 0


def test_a_harness_clock_slowed_by_less_than_half_gains_nothing() -> None:
    """``slow_harness_clock.py`` runs the harness's clock at 0.6 of real time: its claims
    explain more than half of the window, so the clock check passes it, and its claimed
    speedup (about 1.67x for the reference's own work) once scored unflagged at 1.52-1.77, and
    beside a spinning core kept a low end of 1.09 after what it left out was charged. On a CPU
    the reward counts the worker's CPU clock over the same calls, which the candidate cannot
    touch, and says so when the claims give more (``clock:``): by a ratio of two clocks over
    the same chunks, 1.6-1.7 idle and beside a spinning core, against the finding's 1.25.

    The fixture sits at the clock check's edge on purpose (its claims explain about half of
    the CPU time per call), so a draw of noise may void it instead (``timing:``): a fresh
    clone's CI saw 0.144 ms claimed against 0.293 ms of CPU time. Either way the claim is not
    the reward."""
    feedback = judge(CHEATS / "slow_harness_clock.py")
    assert feedback.correct, feedback.error
    if feedback.suspect is not None:
        # Void: the clock check saw through it.
        assert feedback.suspect.startswith("timing:"), feedback.flags
        assert feedback.speedup == 0.0
        return
    assert any(flag.startswith("clock:") for flag in feedback.flags), feedback.flags
    assert feedback.speedup_interval is not None
    # The reference's own work, by the CPU clock: far from the claim's 1.67x.
    assert feedback.speedup_interval[0] < 1.5, (
        feedback.speedup_interval,
        feedback.kernelbench.timings,
    )


def test_a_program_hogging_the_timing_cpu_voids_no_honest_rewrite(tmp_path: Path) -> None:
    """Another program spinning on the timing CPU preempts the reference's long calls (a
    row-by-row forward, about 1 ms a call) inside its chunks: their wall-time claims then
    exceed the worker's CPU time, and by the CPU clock the reference's time between the calls
    went below zero in every chunk. An honest rewrite 19 times faster, whose short chunks
    mostly run whole, was void by that comparison in 4 of 4 evaluations ("hidden: ... surely
    0.55 ms more between the calls"). The reference's time between its calls is bounded by
    its host time there, which the hog cannot push down."""
    cpu = timing_cpu()
    if cpu is None:
        pytest.skip("one CPU here: nothing to pin to")
    problem = tmp_path / "row_by_row.py"
    problem.write_text(ROW_BY_ROW)
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    hog = subprocess.Popen([sys.executable, "-c", spin])
    try:
        # Timed adaptively, as a search times: the reference's chunks (about 17 ms) outlast
        # the hog's time slices (fixed calls come in chunks too short to show it).
        feedback = judge(CHEATS / "honest.py", problem, repeats=None)
        assert hog.poll() is None  # it spun through the whole evaluation
    finally:
        hog.kill()
        hog.wait()
    assert feedback.correct, feedback.error
    assert feedback.suspect is None, feedback.flags
    assert not any(flag.startswith("hidden:") for flag in feedback.flags), feedback.flags
    # A timed verdict, not one that stopped before the window: its calls were counted.
    assert (
        feedback.kernelbench.timings["candidate"].trials > 0
        and feedback.speedup_interval is not None
    )


@pytest.mark.parametrize(
    ("fixture", "lies"), [("honest.py", False), ("patch_harness_clock.py", True)]
)
def test_a_parent_late_to_stamp_the_markers_voids_no_honest_clock(
    fixture: str, lies: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the parent's serving thread stamps a chunk's end marker late: an
    honest 0.08 ms call was seen at 0.54 ms of host time per call, and its evaluation was void
    (``timing:``). Here every timed chunk's end marker is stamped 5 ms late, against calls of
    about 0.2 ms: the worker's CPU clock, which stands still while it waits for the answer,
    still tells an honest clock from a lying one."""
    from maxcode.kinds.kernelbench import listener
    from maxcode.kinds.kernelbench.evidence import End

    handle = listener.Conversation._handle

    def late(self: listener.Conversation, message: Any, stream: Any) -> None:
        if isinstance(message, End) and message.phase == "K":
            time.sleep(0.005)
        handle(self, message, stream)

    monkeypatch.setattr(listener.Conversation, "_handle", late)
    feedback = judge(CHEATS / fixture)
    assert feedback.correct, feedback.error
    timing = [flag for flag in feedback.flags if flag.startswith("timing:")]
    assert bool(timing) == lies, feedback.flags
    # The stamps were late indeed: host time saw more than twice what the calls claimed.
    host = feedback.kernelbench.timings["candidate"].host_s
    assert host is not None and host > 2 * feedback.kernelbench.timings["candidate"].median_s


def test_a_thread_started_during_timing_is_flagged() -> None:
    feedback = judge(CHEATS / "threads.py")
    assert any(flag.startswith("threads: the candidate started") for flag in feedback.flags)
    assert feedback.speedup == 0.0 and feedback.suspect is not None


def test_a_run_wrong_only_on_its_second_call_is_nondeterministic(tmp_path: Path) -> None:
    # Three warm-up calls come first (CPU), then seed 0's two runs: calls 4 and 5.
    second_wrong = (
        "self.calls = getattr(self, 'calls', 0) + 1\n"
        "        return torch.relu(x) + (1.0 if self.calls == 5 else 0.0)"
    )
    feedback = judge(model_new(second_wrong), write_problem(tmp_path, "return torch.relu(x)"))
    assert not feedback.correct
    assert any(flag.startswith("nondeterministic: seed 0") for flag in feedback.flags)


@pytest.mark.parametrize(
    ("forward", "message"),
    [
        ("return torch.relu(x).double()", "dtype float64, expected float32"),
        ("return torch.relu(x)[:, :10]", "shape (32, 10), expected (32, 64)"),
        ("return (torch.relu(x), x)", "2 outputs, expected 1"),
        ("return torch.nn.Parameter(torch.relu(x))", "not a plain torch.Tensor"),
        ("return torch.relu(x).tolist()", "not a plain torch.Tensor"),
        ("raise ValueError('kernel exploded')", "ValueError: kernel exploded"),
    ],
)
def test_wrong_types_shapes_and_crashes_are_named(
    tmp_path: Path, forward: str, message: str
) -> None:
    feedback = judge(model_new(forward), write_problem(tmp_path, "return torch.relu(x)"))
    assert not feedback.correct and feedback.compiled
    assert feedback.error is not None and message in feedback.error.message


def test_a_candidate_that_does_not_import_did_not_compile(tmp_path: Path) -> None:
    problem = write_problem(tmp_path, "return torch.relu(x)")
    broken = judge("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n", problem)
    assert not broken.compiled and broken.error is not None
    assert broken.error.kind == "compile_error" and "syntax error" in broken.error.message
    missing = judge("import torch\n", problem)
    assert not missing.compiled and missing.error is not None
    assert "no ModelNew" in missing.error.message


def test_the_candidate_runs_with_address_randomization_off(tmp_path: Path) -> None:
    """A randomized layout makes a bias that lasts a whole process (worker ``layout.fix_layout``):
    the candidate's process runs with randomization off. This candidate is right only so."""
    problem = write_problem(tmp_path, "return torch.relu(x)")
    layout_aware = model_new(
        "fixed = ctypes.CDLL(None).personality(0xFFFFFFFF) & 0x0040000\n"
        "        return torch.relu(x) if fixed else torch.relu(x) + 1",
        imports="import ctypes",
    )
    assert judge(layout_aware, problem, repeats=2).correct


def test_both_workers_of_a_round_share_the_layout_drawn_for_it(tmp_path: Path) -> None:
    """A layout fixed once for all made biases that every round repeated; each round draws
    one, shared by its two workers (worker ``layout.fix_layout``). Here the problem's output
    depends on the draw as its own worker sees it: the identical candidate is right over two
    rounds only if its worker saw the reference's draw in each, and a candidate that assumes
    no draw is wrong."""
    environment = "__import__('os').environ"
    drawn = (
        f"int({environment}.get('MAXCODE_LAYOUT_SEED', '0')) % 9973"
        f" + len({environment}.get('MAXCODE_LAYOUT_PAD', ''))"
    )
    problem = write_problem(tmp_path, f"return x + {drawn}")
    identical = problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
    assert judge(identical, problem, repeats=2, rounds=2).correct
    assert not judge(model_new("return x + 0"), problem, repeats=2).correct


@pytest.mark.parametrize("rounds", [1, 2])
def test_both_workers_run_the_task_on_one_cpu(tmp_path: Path, rounds: int) -> None:
    """Everything of the task and the candidate runs on one CPU, from their import on: the
    timing CPU when the round holds its turn (pinned by the sandbox, or moved there by the
    parent once torch is loaded: listener ``_loaded``), another one while it waits for the
    turn (runner ``elsewhere``). The problem adds 1 where its module was imported on one CPU,
    the candidate 2 * that - 1: right only where both were."""
    if timing_cpu() is None:
        pytest.skip("one CPU here: nothing to pin to")
    probe = "import os\nPINNED = int(len(os.sched_getaffinity(0)) == 1)\n"
    problem = write_problem(tmp_path, "return x + PINNED")
    problem.write_text(probe + problem.read_text())
    both = model_new("return x + (2 * PINNED - 1)", imports=probe)
    assert judge(both, problem, repeats=2, rounds=rounds).correct


@pytest.mark.parametrize("rounds", [1, 2])
def test_a_round_that_finds_the_turn_taken_starts_on_another_cpu(rounds: int) -> None:
    """While another evaluation holds the timing CPU's turn (this test, here), a round's workers
    start up and check on another CPU, never on the timing CPU; once the turn is free they time
    on the timing CPU (else the judge's affinity check would void it: ``cpu:``), and the wait
    shows as ``phases.turn``."""
    cpu = timing_cpu()
    if cpu is None:
        pytest.skip("one CPU here: nothing to pin to")
    held = CpuTurn(cpu)
    held.take()
    try:
        elsewhere = held.elsewhere
        if not elsewhere:
            pytest.skip("no other CPU's turn is free here")
        done: dict[str, Feedback] = {}
        judged = threading.Thread(
            target=lambda: done.update(feedback=judge(CHEATS / "honest.py", rounds=rounds))
        )
        judged.start()
        seen: dict[str, set[int]] = {}
        deadline = time.monotonic() + 120
        while len(seen) < 2 and judged.is_alive() and time.monotonic() < deadline:
            for pid in processes_of_this_test("harness/worker"):
                with contextlib.suppress(OSError):
                    executable = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                    if executable == sys.executable.encode():  # not the sandbox around it
                        seen[pid] = os.sched_getaffinity(int(pid))
            time.sleep(0.05)
    finally:
        held.release()
    judged.join()
    assert len(seen) >= 2, seen  # both workers (or zygotes) seen while the turn was held
    assert all(allowed == set(elsewhere) for allowed in seen.values()), (seen, elsewhere)
    feedback = done["feedback"]
    assert feedback.correct and feedback.suspect is None, feedback.flags
    assert feedback.phases["turn"] > 0


_LAYOUT_PROBE = """
import ctypes, importlib.util, mmap, os, sys
found = importlib.util.spec_from_file_location("layout", sys.argv[1])
layout = importlib.util.module_from_spec(found)
found.loader.exec_module(layout)
layout.fix_layout()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
mapped = ctypes.addressof(ctypes.c_char.from_buffer(mmap.mmap(-1, 1 << 20)))
# A block larger than any free chunk start-up leaves: it comes from the heap's top, after the
# pad (a small one could come from a freed chunk below it, as the start-up's allocations fell).
print(os.environ.get("MAXCODE_LAYOUT_SET", "-"), len(os.environ.get("MAXCODE_LAYOUT_PAD", "")),
      libc.malloc(1 << 20), mapped)
"""


def test_a_layout_draw_moves_the_stack_the_heap_and_the_mappings_and_repeats(
    tmp_path: Path,
) -> None:
    """What worker ``layout.fix_layout`` does with a draw, in real processes: the same draw lays
    out two processes alike (randomization off), another draw moves the stack's start, the
    next heap block and the next mapping."""
    import os
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(_LAYOUT_PROBE)
    worker = REPO / "src" / "maxcode" / "kinds" / "kernelbench" / "worker" / "layout.py"

    def layout(seed: int) -> list[str]:
        environment = {
            "PATH": os.environ["PATH"],
            # The workers' setting: the heap pad is on the heap.
            "MALLOC_MMAP_THRESHOLD_": str(256 << 20),
            "PYTHONHASHSEED": "0",  # start-up's allocations the same in every probe
            "MAXCODE_LAYOUT_SEED": str(seed),
        }
        command = [sys.executable, "-I", str(probe), str(worker)]
        done = subprocess.run(command, env=environment, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    first = layout(0x1234567890)
    if first[0] != "1":
        pytest.skip("personality(2) is refused here: the layout cannot be fixed")
    assert first == layout(0x1234567890)
    other = layout(0x0987654321)
    assert other[0] == "1"
    assert [first[1], other[1]] == [str(0x890 * 16), str(0x321 * 16)]
    assert first[2] != other[2] and first[3] != other[3]


def test_large_tensors_start_on_a_page_boundary_of_a_4_kib_page(tmp_path: Path) -> None:
    """Where a large buffer falls within its page, and whether a process got huge pages, were
    drawn per process and made biases that last a whole worker (runner ``_environment``,
    worker ``layout.no_huge_pages``): tensors of 2 MiB and more start on a page boundary, the
    inputs the worker makes and the candidate's own outputs alike, and the process takes no
    transparent huge pages. This candidate is right only when all of that holds."""
    problem = write_problem(tmp_path, "return torch.relu(x)", inputs="[torch.randn(1024, 1024)]")
    page_aware = model_new(
        "y = torch.relu(x)\n"
        "        aligned = x.data_ptr() % 4096 == 0 and y.data_ptr() % 4096 == 0\n"
        "        status = open('/proc/self/status').read()\n"
        "        small = 'THP_enabled:\\t0' in status or 'THP_enabled' not in status\n"
        "        return y if aligned and small else y + 1"
    )
    assert judge(page_aware, problem, repeats=2).correct


def test_timed_inputs_land_on_pages_drawn_per_call(tmp_path: Path) -> None:
    """Which page a call's output falls on relative to its input followed each process's heap
    history, and set the speed of whole rounds (identical scaled ``level1/89_cumsum``
    candidates at 1.11-1.17 in 5 of 8 rounds). Timed inputs are placed on pages drawn per
    call (worker ``timing.Timing._placed``), still on a page boundary. This candidate is right only
    while its timed inputs fall on varied pages (after 3 warm-up calls and 6 checked ones)."""
    problem = write_problem(tmp_path, "return torch.relu(x)", inputs="[torch.randn(512, 1024)]")
    placement_aware = model_new(
        "self.calls = getattr(self, 'calls', 0) + 1\n"
        "        self.seen = getattr(self, 'seen', [])\n"
        "        if self.calls > 9:\n"
        "            self.seen.append(x.data_ptr() % (2 << 20))\n"
        "        varied = len(self.seen) < 8 or len(set(self.seen)) >= 4\n"
        "        paged = x.data_ptr() % 4096 == 0\n"
        "        y = torch.relu(x)\n"
        "        return y if varied and paged else y + 1"
    )
    feedback = judge(placement_aware, problem, repeats=20)
    assert feedback.correct, feedback.error


def test_a_candidate_that_turns_huge_pages_back_on_is_void() -> None:
    settings = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not settings.is_file() or "[never]" in settings.read_text():
        pytest.skip("this system gives no process transparent huge pages")
    feedback = judge(CHEATS / "huge_pages.py")
    assert feedback.correct and feedback.speedup == 0.0
    assert feedback.suspect is not None and feedback.suspect.startswith("memory:"), feedback.flags


def test_a_candidate_cannot_move_its_calls_to_another_cpu() -> None:
    """``other_cpu.py`` moves each call to another CPU and back before it returns (at the end
    of a chunk it is on the timing CPU, its CPU clock within host time): the sandbox refuses
    the move itself, so the call fails and nothing is timed."""
    if timing_cpu() is None:
        pytest.skip("one CPU here: nowhere else to go")
    feedback = judge(CHEATS / "other_cpu.py")
    assert not feedback.correct and feedback.speedup == 0.0
    assert feedback.error is not None and feedback.error.kind == "runtime_error"
    assert "PermissionError" in feedback.error.message, feedback.error.message


def test_a_candidate_that_never_returns_is_killed(tmp_path: Path) -> None:
    problem = write_problem(tmp_path, "return torch.relu(x)")
    feedback = judge(model_new("while True:\n            pass"), problem, timeout_s=6)
    assert not feedback.correct and feedback.error is not None
    assert feedback.error.kind == "timeout"


def test_tolerance_is_per_dtype_and_configurable(tmp_path: Path) -> None:
    problem = write_problem(tmp_path, "return torch.relu(x)")
    nudged = model_new("return torch.relu(x) + 1e-3")
    assert not judge(nudged, problem).correct
    assert judge(nudged, problem, tolerance=1e-2).correct
    half = write_problem(tmp_path, "return torch.relu(x).half()")
    assert judge(model_new("return (torch.relu(x) + 1e-3).half()"), half).correct


def test_integer_inputs_and_outputs_are_kept_and_compared_exactly(tmp_path: Path) -> None:
    problem = write_problem(
        tmp_path, "return x * 3 + 1", inputs="[torch.randint(0, 100, (16, 16))]"
    )
    assert judge(model_new("return x.mul(3).add(1)"), problem).correct
    off_by_one = judge(model_new("return x * 3"), problem)
    assert not off_by_one.correct and off_by_one.error is not None
    assert "exact match needed" in off_by_one.error.message


def test_shapes_scale_down_and_the_scale_is_recorded(tmp_path: Path) -> None:
    feedback = judge(CHEATS / "honest.py", scale=0.5)
    assert feedback.correct and feedback.kernelbench.shape_scale == 0.5


@pytest.mark.parametrize(
    ("forward", "flag"),
    [
        ("return x * 1e-9", "task: an all-zeros output passes the tolerance"),
        ("return x * 0 + 3.0", "task: a constant output passes the tolerance"),
        ("return x + torch.randn_like(x)", "task: the reference disagrees with itself"),
        ("return x.add_(1).clone()", "task: the reference changes its inputs in place"),
    ],
)
def test_the_task_itself_is_screened_on_every_evaluation(
    tmp_path: Path, forward: str, flag: str
) -> None:
    problem = write_problem(tmp_path, forward)
    feedback = judge(model_new(forward), problem)
    assert any(found.startswith(flag) for found in feedback.flags), feedback.flags


def test_a_broken_reference_is_a_clear_error_with_exit_2(tmp_path: Path) -> None:
    problem = write_problem(tmp_path, "raise RuntimeError('reference is broken')")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(model_new("return x"))
    result = run_maxcode("eval", str(problem), str(candidate), "--no-compile-baseline")
    assert result.returncode == 2
    assert "the reference does not run: RuntimeError: reference is broken" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_reference_killed_from_outside_is_named_as_killed(tmp_path: Path) -> None:
    # The kernel's OOM killer ends a worker with SIGKILL; the parent then finds its
    # conversation broken (a broken pipe), which is the symptom, not the cause to report.
    forward = (
        "import os, signal\n"
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 12:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return x * 2"
    )
    problem = write_problem(tmp_path, forward)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(model_new("return x * 2"))
    result = run_maxcode("eval", str(problem), str(candidate), "--repeats", "40")
    assert result.returncode == 2
    assert "the reference's process was killed (signal 9)" in result.stderr
    assert "broke the protocol" not in result.stderr and "Traceback" not in result.stderr


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = run_maxcode("eval", str(PROBLEM), str(CHEATS / "honest.py"), "--device", "cuda")
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr and "Traceback" not in result.stderr


def test_profiles_say_where_each_forward_spends_its_time(honest: Judged) -> None:
    from maxcode.search.observation import describe_feedback

    feedback = judge(CHEATS / "honest.py", profile=True)
    assert feedback.correct
    reference, candidate = feedback.profiles["reference"], feedback.profiles["candidate"]
    # The reference: a matrix product, a tanh and a multiplication, each once per call.
    names = {op.name for op in reference.top}
    assert {"aten::tanh", "aten::mul"} <= names and names & {"aten::mm", "aten::addmm"}
    assert reference.launches == pytest.approx(3.0)
    assert 0.9 <= sum(op.share for op in reference.top) <= 1.0 + 1e-9
    assert reference.allocated_bytes > 0 and reference.clock == "cpu"
    assert {"aten::tanh", "aten::mm"} <= {op.name for op in candidate.top}
    text = describe_feedback(feedback)
    assert "Profile of the reference's forward: aten::" in text
    assert "Profile of the candidate's forward: aten::" in text
    assert "time in aten::" in feedback.summary()
    assert honest.feedback.profiles == {}  # the same candidate judged without profile=True


def test_the_roofline_counts_the_references_work_and_the_candidates_share(
    honest: Judged,
) -> None:
    from maxcode.search.observation import describe_feedback

    feedback = honest.feedback
    roofline = feedback.kernelbench.roofline
    assert feedback.correct and roofline is not None
    # x (64x128) @ weight (128x128); x, the weight and the output moved once, 4 bytes each.
    assert roofline.flops == 2 * 64 * 128 * 128
    assert roofline.bytes == (64 * 128 + 128 * 128 + 64 * 128) * 4
    assert roofline.flop_rate > 1e8 and roofline.byte_rate > 1e8
    assert roofline.memory_floor_s == pytest.approx(roofline.bytes / roofline.byte_rate)
    assert roofline.floor_s == pytest.approx(
        max(roofline.flops / roofline.flop_rate, roofline.memory_floor_s)
    )
    assert roofline.fraction == pytest.approx(roofline.floor_s / feedback.candidate_cost)
    assert "Roofline: speed of light" in describe_feedback(feedback)
    assert "of the speed of light" in feedback.summary()


def test_on_a_cpu_the_speed_of_light_is_reported_not_enforced() -> None:
    """A candidate that skips reading an input beats the memory floor; on a CPU, where inputs
    sit in the caches, the floor is no bound, so nothing is capped (the cap is CUDA's, tested
    with the ``gpu`` tests)."""
    feedback = judge(CHEATS / "skip_input.py", CHEATS / "skip_problem.py", scale=1 / 32)
    roofline = feedback.kernelbench.roofline
    assert feedback.correct and roofline is not None
    assert roofline.bytes == (2 * 8 * 8 + 4 * 1024 * 1024) * 4  # sizes stay at least 8
    # Reported (a measured rate: how far past the floor is the machine's to say), never capped.
    assert roofline.fraction is not None and roofline.fraction > 0
    assert not roofline.capped and not any("speed of light" in f for f in feedback.flags)


def test_a_claim_past_the_memory_floor_is_flagged_and_capped_on_cuda() -> None:
    from maxcode.harness.integrity import Verdict
    from maxcode.kinds.kernelbench.roofline import ROOFLINE_SLACK, cap_at_light
    from maxcode.types import Roofline

    verdict = Verdict(task="problem", metric="wall", isolation="bwrap", digest="", tests_total=3)
    light = Roofline(
        flops=0, bytes=3_000_000, flop_rate=1e13, byte_rate=3e12, floor_s=1e-6,
        memory_floor_s=1e-6,
    )  # fmt: skip
    # Reference 30 us; a candidate claiming 0.5 us beats the 1 us floor by 2x.
    speedup, capped = cap_at_light(verdict, 60.0, 30e-6, light)
    assert speedup == pytest.approx(30e-6 / (1e-6 / ROOFLINE_SLACK))
    assert capped.capped and capped.fraction == pytest.approx(ROOFLINE_SLACK)
    assert len(verdict.flags) == 1 and "faster than the speed of light" in verdict.flags[0]
    # A warning: the reward is capped, not voided.
    assert verdict.flags[0].startswith("implausible:")
    # Within the slack: left alone.
    speedup, kept = cap_at_light(verdict, 30e-6 / 0.8e-6, 30e-6, light)
    assert speedup == pytest.approx(37.5) and not kept.capped and len(verdict.flags) == 1
