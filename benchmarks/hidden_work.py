"""How often work hidden outside the timed calls is caught: a cheat fixture judged again and again.

The KernelBench cheats that do their work while the harness makes the inputs
(``tests/fixtures/kernelbench/cheats/hook_inputs.py``, ``hook_factory.py``) are caught only
statistically: the parent compares the two sides' time outside their calls, pair by pair
(the outside excess), in two parts (making the inputs, sending the outputs), each by two
clocks, host time and the worker's CPU time. This evaluates one
fixture ``--runs`` times against full-size ``1_ScaledGELU`` (``--repeats`` calls per side; 24,
as the test does) and prints per run the verdict (void, charged, or kept), the speedup, the
low end of its interval (what selection uses) and each excess (ms per call) with its interval;
then the counts. A "kept" run is a hole. ``--fixture`` takes a cheat's file name, or
``identical`` (the reference as its own candidate: how far from 0 honest excesses fall).

    python benchmarks/hidden_work.py --fixture hook_factory.py --runs 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from maxcode.evaluate import Sandbox, evaluate_task  # noqa: E402

from maxcode.kinds.kernelbench import judge as judge_module  # noqa: E402
from maxcode.kinds.kernelbench.channel import OUTSIDE_PARTS  # noqa: E402
from maxcode.kinds.load import load_task  # noqa: E402

PARTS = [(clock, part.split()[-1]) for part in OUTSIDE_PARTS for clock in ("host", "cpu")]
"""The order the judge computes the excesses in: per part of the outside span, each clock."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", default="hook_inputs.py")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=24, help="0: adaptive timing")
    parser.add_argument("--isolation", default="bwrap")
    args = parser.parse_args()
    task = load_task(str(REPO / "examples" / "kernelbench" / "1_ScaledGELU.py"), scale=1.0)
    if args.fixture == "identical":
        source = task.reference + "\n\nclass ModelNew(Model):\n    pass\n"
    else:
        source = (REPO / "tests" / "fixtures" / "kernelbench" / "cheats" / args.fixture).read_text()
    seen = []
    real = judge_module.paired_excess

    def recorded(reference: list[float], candidate: list[float], spread: float = 0.0):  # type: ignore[no-untyped-def]
        excess = real(reference, candidate, spread)
        seen.append((len(reference), excess))
        return excess

    judge_module.paired_excess = recorded
    counts = {"void": 0, "charged": 0, "kept": 0}
    for number in range(args.runs):
        seen.clear()
        feedback = evaluate_task(
            task, source, repeats=args.repeats or None, sandbox=Sandbox(args.isolation)
        )
        low = feedback.speedup_interval[0] if feedback.speedup_interval else feedback.speedup
        if feedback.suspect is not None or not feedback.correct:
            verdict = "void"
        elif any(flag.startswith("outside:") for flag in feedback.flags) or low < 1.0:
            verdict = "charged"
        else:
            verdict = "kept"
        counts[verdict] += 1
        pairs = seen[-1][0] if seen else 0
        shown = []
        for (clock, part), (_, excess) in zip(PARTS, seen[-len(PARTS) :]):
            text = f"{clock} {part} {excess.seconds * 1e3:6.2f} ms"
            if excess.low is not None and excess.high is not None:
                text += f" ({excess.low * 1e3:6.2f} to {excess.high * 1e3:6.2f})"
            shown.append(text)
        print(
            f"{number:3d} {verdict:8s} speedup {feedback.speedup:8.3f} low {low:8.3f} "
            f"pairs {pairs:3d} {' '.join(shown)}"
            + (f" [{feedback.suspect.split(':')[0]}]" if feedback.suspect else ""),
            flush=True,
        )
    print(" ".join(f"{name} {count}" for name, count in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
