"""Cheats on what the KernelBench candidate can learn or break inside its own process: the
seeds of the checked and timed inputs (spec file, /proc, the harness's objects, the harness's
own calls to torch) and the parent's host time stamps (descriptor 3 closed, broken, forged).

Each earns no clean reward, at every isolation level the tool accepts: it is wrong (the answers
it prepared are for inputs it never gets), or it is correct with a void finding (reward 0,
``suspect`` set). The tests assert verdicts and findings, never timings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxcode.errors import MaxcodeError
from maxcode.harness.sandbox import Sandbox
from maxcode.kinds import evaluate_task
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import REPO

pytest.importorskip("torch")

CHEATS = REPO / "tests" / "fixtures" / "kernelbench" / "cheats"
PROBLEM = REPO / "examples" / "kernelbench" / "1_ScaledGELU.py"
LEVELS = ["bwrap", "unshare"]


def judge(fixture: str, isolation: str, scale: float = 1 / 16) -> Feedback:
    try:
        sandbox = Sandbox(isolation)  # type: ignore[arg-type]
        task = load_task(str(PROBLEM), scale=scale)
        return evaluate_task(task, (CHEATS / fixture).read_text(), repeats=24, sandbox=sandbox)
    except MaxcodeError as error:  # a level this machine cannot offer
        pytest.skip(f"{isolation}: {error}")


def assert_no_clean_reward(feedback: Feedback) -> None:
    assert feedback.speedup == 0.0, (feedback.flags, feedback.kernelbench.timings)
    assert not feedback.correct or feedback.suspect is not None


@pytest.mark.parametrize("isolation", LEVELS)
@pytest.mark.parametrize("fixture", ["spec_seeds.py", "proc_seeds.py", "harness_memory.py"])
def test_no_seed_is_there_to_find_before_the_model_is_built(fixture: str, isolation: str) -> None:
    """The answers prepared in the constructor are for warm-up inputs at best: the checked
    inputs' seeds arrive after warm-up, so the first check is wrong."""
    feedback = judge(fixture, isolation)
    assert_no_clean_reward(feedback)
    assert not feedback.correct and feedback.error is not None
    assert feedback.error.kind == "wrong_answer" and "seed 0" in feedback.error.message


@pytest.mark.parametrize("isolation", LEVELS)
@pytest.mark.parametrize(
    "fixture", ["hook_inputs.py", "hook_factory.py", "hook_thread.py", "hook_outputs.py"]
)
def test_answers_made_while_the_harness_makes_inputs_are_seen_by_host_time(
    fixture: str, isolation: str
) -> None:
    """Hooking the harness's ``torch.manual_seed`` or ``torch.randn`` moves the work before
    the timed call (``hook_factory.py`` hides only the call's own work, about the
    reference's); hooking ``Tensor.detach`` (``hook_outputs.py``) moves it after, to when the
    harness sends the outputs. The parent's stamps from a chunk's seeds to its outputs still
    contain it, pair by pair against the reference's, in three parts (making the inputs,
    between the calls, sending the outputs: the quiet ones are not drowned in the other's
    noise), by host time
    and by the worker's CPU clock (which also sees ``hook_thread.py``'s work on another CPU,
    beside host time that does not grow). Full-size shapes: the hidden work must stand out
    from the noise of making the inputs and sending the outputs (see the README). Surely more
    hidden than claimed is void (``hidden``, once a round of fresh workers repeats it), and
    so are in-process timings that the host's clock does not bear out (``timing``), a
    worker that spent more CPU time than host time (``parallel``; ``hook_thread.py``'s helper
    asks to leave the timing CPU and is refused by the sandbox); were the noise to blur
    that, the likely hidden time is still charged to what selection uses, and said
    (``outside:``). A draw where ``hook_thread.py``'s helper loses the race leaves the work
    to the timed call, which waits for it (0.03x-0.06x measured, no finding): what selection
    uses then stays below the bound the other cheats are held to."""
    feedback = judge(fixture, isolation, scale=1.0)
    assert feedback.correct, feedback.error
    if feedback.suspect is not None:
        assert_no_clean_reward(feedback)
        assert feedback.suspect.startswith(("hidden:", "timing:", "parallel:")), feedback.suspect
    elif not any(flag.startswith("outside:") for flag in feedback.flags):
        # Not void and nothing charged: nothing was hidden, so nothing was gained.
        assert feedback.speedup_interval is not None, feedback.flags
        assert feedback.speedup_interval[0] < 1.5, (
            feedback.speedup_interval,
            feedback.kernelbench.timings,
        )


@pytest.mark.parametrize("isolation", LEVELS)
def test_work_handed_to_another_process_is_counted_while_timed(isolation: str) -> None:
    """``fork_helper.py`` forks a child that leaves the run's CPU and computes every answer from
    inputs copied into shared memory: neither the worker's CPU clock nor host time need grow
    by the work, but the parent reads the CPU clocks of every process of the run, and the
    reference's run has none besides its worker."""
    feedback = judge("fork_helper.py", isolation, scale=1.0)
    assert feedback.correct, feedback.error
    assert_no_clean_reward(feedback)
    assert any(flag.startswith("untracked:") for flag in feedback.flags), feedback.flags


@pytest.mark.parametrize("isolation", LEVELS)
@pytest.mark.parametrize("fixture", ["close_channel.py", "break_channel.py", "fake_markers.py"])
def test_no_host_evidence_no_reward(fixture: str, isolation: str) -> None:
    """Descriptor 3 closed, pointed elsewhere or written to by the candidate: the conversation
    with the parent breaks, and a run without host evidence earns nothing."""
    feedback = judge(fixture, isolation)
    assert_no_clean_reward(feedback)
    assert any(flag.startswith(("evidence:", "timing:")) for flag in feedback.flags), (
        feedback.flags,
        feedback.error,
    )


def test_the_spec_file_holds_no_seed_of_a_checked_or_timed_input(tmp_path: Path) -> None:
    """What a worker can read before its model is built: problem, candidate, the weights' seed
    and the warm-up seeds, each drawn on its own."""
    from maxcode.kinds.kernelbench.parameters import KernelBenchSettings
    from maxcode.kinds.kernelbench.runner import Job

    task = load_task(str(PROBLEM))
    job = Job.write(task, "class ModelNew: pass\n")
    try:
        spec = job.spec(task, KernelBenchSettings())
        written = json.loads(spec.dumps())
        seeds = {key for key in written if "seed" in key}
        assert seeds == {"init_seed", "warmup_seeds"}
        assert not set(job.seeds.check) & {spec.init_seed, *spec.warmup_seeds}
    finally:
        job.remove()


def test_answers_computed_ahead_within_a_chunk_gain_nothing() -> None:
    """``look_ahead.py`` computes, in a chunk's first call, the answers of all its calls (their
    inputs exist already, in the harness's frames) and hands them out on the later calls:
    right answers, mostly instant calls. A chunk counts by its calls' whole time, so it is
    scored at what it costs (a median of the calls gave it its chunks' size: 5x here, 1,200x
    with full chunks); the interval's low end stays below a bound far from that."""
    task = load_task(str(PROBLEM), scale=1 / 16)
    feedback = evaluate_task(task, (CHEATS / "look_ahead.py").read_text(), repeats=24)
    assert feedback.correct, feedback.error
    assert feedback.speedup_interval is not None or feedback.suspect is not None
    assert feedback.suspect is not None or feedback.speedup_interval[0] < 1.5, (  # type: ignore[index]
        feedback.speedup_interval,
        feedback.kernelbench.timings,
    )


def test_an_output_that_computes_itself_when_read_is_refused() -> None:
    """``lazy_outputs.py`` returns a list subclass that computes its tensor when iterated, so
    only the outputs the harness sends would ever be computed. Outputs are read as stored, by
    exact type, on every call: it is not a plain tensor."""
    task = load_task(str(PROBLEM), scale=1 / 16)
    feedback = evaluate_task(task, (CHEATS / "lazy_outputs.py").read_text(), repeats=24)
    assert not feedback.correct and feedback.error is not None
    assert feedback.error.kind == "runtime_error"
    assert "not a plain torch.Tensor" in feedback.error.message


def test_outputs_computed_only_when_read_are_all_read() -> None:
    """``unsent_outputs.py`` leaves each timed call's output unwritten and computes it when the
    harness reads it to send. The harness once sent only the outputs the parent asked for
    after the calls (one per chunk when all did not fit), so the rest were never computed:
    13x at a quarter of the shapes, interval low end 4.5. Every output is sent now, and the
    parent keeps the ones it drew without saying which, so all the work lands in sending the
    outputs, where host time sees it."""
    task = load_task(str(PROBLEM), scale=0.25)
    feedback = evaluate_task(task, (CHEATS / "unsent_outputs.py").read_text())
    assert feedback.correct, feedback.error
    assert feedback.speedup_interval is not None or feedback.suspect is not None
    assert feedback.suspect is not None or feedback.speedup_interval[0] < 1.5, (  # type: ignore[index]
        feedback.speedup_interval,
        feedback.flags,
    )


def test_a_thread_that_runs_during_the_references_turns_is_void() -> None:
    """``steal_turns.py`` starts a thread at import that spins whenever its main thread is
    blocked waiting for its turn, that is while the reference's chunk runs on the same CPU:
    the reference's calls slow down, the candidate's own do not (1.7x, low end 1.03-1.06, no
    finding, before). The parent reads the worker's CPU clock when it asks for its turn and
    when it gets it; an honest worker spends nothing in between."""
    task = load_task(str(PROBLEM), scale=0.25)
    feedback = evaluate_task(task, (CHEATS / "steal_turns.py").read_text())
    assert feedback.correct, feedback.error
    assert_no_clean_reward(feedback)
    assert any(
        flag.startswith("parallel:") and "waited for its turns" in flag for flag in feedback.flags
    ), feedback.flags


def test_a_worker_slow_to_block_pays_for_it_and_is_not_called_parallel() -> None:
    """``slow_to_block.py`` keeps its CPU 2 ms after every message before it blocks (as a
    worker the host holds between its write and its block does). The parent stamps a
    ``next`` or ``begin`` once the worker is off its CPU, so the tail is the worker's own time
    outside its calls, never time it waited for its turn (void ``parallel:``, 40-45 ms "while
    it waited", 2 of 2 before) nor time of its calls (``timing:``, once beside the suite when
    ``end`` was stamped so too); and the floor passes only then, so the reference's chunk
    does not share the CPU with it."""
    task = load_task(str(PROBLEM), scale=0.25)
    feedback = evaluate_task(task, (CHEATS / "slow_to_block.py").read_text())
    assert feedback.correct, feedback.error
    wrongly = [flag for flag in feedback.flags if flag.startswith(("parallel:", "timing:"))]
    assert not wrongly, feedback.flags
    # The tails are work the reference does not do (6 ms a chunk, about 0.2 ms a call here):
    # charged and said, or, beside a busy machine, void as work outside its calls in two
    # rounds of fresh workers in a row.
    if feedback.suspect is not None:
        assert feedback.suspect.startswith("hidden:"), feedback.flags
    else:
        assert any(flag.startswith("outside:") for flag in feedback.flags), feedback.flags
