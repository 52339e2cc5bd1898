"""The reward's clock on a GPU (``gpu`` marker, opt-in with ``MAXCODE_TEST_GPU=1``): the parent's
stamps around each chunk of timed calls, which wait for the whole device, not the candidate's
CUDA events. A patched event timer, work on a side stream joined late, work launched after the
end marker and a CUDA graph replayed on stale inputs earn no clean reward; an honest copy of the
reference is clean (its figure is the GPU check's to report)."""

from __future__ import annotations

import pytest

from maxcode.kinds import evaluate_task
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import REPO

pytest.importorskip("torch")

CHEATS = REPO / "tests" / "fixtures" / "kernelbench" / "cheats"


def _judge(fixture: str) -> Feedback:
    task = load_task(str(CHEATS / "problem.py"))
    return evaluate_task(task, (CHEATS / fixture).read_text(), device="cuda", rounds=2)


@pytest.mark.gpu
def test_a_patched_event_timer_claims_twice_and_is_paid_by_the_parent_s_clock() -> None:
    feedback = _judge("gpu_patch_event.py")
    print(f"gpu_patch_event.py: {feedback.speedup:.3f} {feedback.flags}")
    assert feedback.correct, feedback.error
    assert feedback.suspect is not None or any(f.startswith("clock:") for f in feedback.flags)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fixture", ["gpu_after_end.py", "gpu_side_stream_late.py", "gpu_graph_replay.py"]
)
def test_work_the_events_do_not_see_earns_no_clean_reward(fixture: str) -> None:
    feedback = _judge(fixture)
    print(f"{fixture}: correct {feedback.correct} {feedback.speedup:.3f} {feedback.flags}")
    clean = feedback.correct and feedback.suspect is None
    assert not clean or feedback.speedup < 1.0, (feedback.speedup, feedback.flags)


@pytest.mark.gpu
def test_an_honest_copy_is_clean_by_the_parent_s_clock() -> None:
    task = load_task(str(CHEATS / "problem.py"))
    source = (CHEATS / "problem.py").read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
    feedback = evaluate_task(task, source, device="cuda", rounds=2)
    print(f"identical: {feedback.speedup:.3f} {feedback.speedup_interval} {feedback.flags}")
    assert feedback.correct and feedback.suspect is None, feedback.flags
    assert not any(flag.startswith("clock:") for flag in feedback.flags), feedback.flags
