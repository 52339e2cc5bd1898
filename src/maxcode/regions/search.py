"""A whole model made faster region by region: ``maxcode optimize MODEL.py --regions N``.

The model is cut (``find_regions``) and its top regions written as problems
(``write_problems``); each is searched by an ordinary run (the caller runs them as one stored
bench, side by side, which ``--resume`` continues). ``optimize_regions`` takes as a region's
kernel its run's verified program when that was surely faster than the region (the low end of
its interval above 1). Each kernel is then put into the model alone
(``stitch.stitched_source``) and the model judged against the original (``judge``: the
harness, as any candidate): a kernel that is wrong inside the model (other strides, aliasing,
attributes the model reads) or surely slower there is dropped, with why. The kernels kept are
stitched together and the model judged once more; that verdict is the result, beside the
speedup the regions' own speedups predict (Amdahl: ``predicted``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maxcode.regions import Region, Regions, write_region
from maxcode.regions.stitch import Winner, stitched_source
from maxcode.types import Feedback

SURELY_FASTER = 1.0
"""A region's kernel is taken when the low end of its verified interval is above this."""


@dataclass
class RegionOutcome:
    """One region's search and what became of its kernel."""

    region: Region
    problem: Path | None = None
    run_id: str | None = None
    speedup: float | None = None
    """The region's verified speedup alone (its own problem), when its run verified one."""
    interval: tuple[float, float] | None = None
    kernel: str | None = None
    """The winning program's source, when it was surely faster alone."""
    inside: Feedback | None = None
    """The model with this kernel alone in place, judged."""
    kept: bool = False
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        inside = self.inside
        return {
            "name": self.region.name,
            "share": self.region.share,
            "problem": str(self.problem) if self.problem else None,
            "run": self.run_id,
            "speedup": self.speedup,
            "speedup_interval": list(self.interval) if self.interval else None,
            "kept": self.kept,
            "why": self.why,
            "inside_speedup": inside.speedup if inside is not None and inside.correct else None,
        }


@dataclass
class ModelOutcome:
    """``optimize --regions``: the regions' searches and the model rebuilt from them."""

    regions: Regions
    outcomes: list[RegionOutcome]
    model: Feedback | None
    """The model with every kept kernel in place, judged (None: no kernel was kept)."""
    stitched: Path | None
    folder: Path
    """Where the region problems (and the stitched model) are."""
    bench_id: str | None = None
    """The stored bench of the regions' runs (``maxcode optimize --resume`` continues it)."""

    @property
    def predicted(self) -> float:
        """The model's speedup the kept regions' own speedups predict (Amdahl)."""
        saved = sum(
            outcome.region.share * (1.0 - 1.0 / outcome.speedup)
            for outcome in self.outcomes
            if outcome.kept and outcome.speedup
        )
        return 1.0 / max(1.0 - saved, 1e-9)

    def as_json(self) -> dict[str, Any]:
        model = self.model
        return {
            "problem": str(self.regions.problem),
            "scale": self.regions.scale,
            "folder": str(self.folder),
            "bench": self.bench_id,
            "regions": [outcome.as_json() for outcome in self.outcomes],
            "model": {
                "correct": model.correct if model is not None else None,
                "speedup": model.speedup if model is not None else 1.0,
                "speedup_interval": (
                    list(model.speedup_interval)
                    if model is not None and model.speedup_interval
                    else None
                ),
                "predicted": self.predicted,
                "stitched": str(self.stitched) if self.stitched else None,
                "summary": model.summary() if model is not None else "no kernel was kept",
            },
        }


def write_problems(
    found: Regions, count: int, folder: Path, say: Callable[[str], None] = lambda line: None
) -> list[RegionOutcome]:
    """The top ``count`` regions written as problems in ``folder`` (the same files again when
    a stopped search resumes): one outcome each, its ``problem`` or why it was not written."""
    outcomes = [RegionOutcome(region) for region in found.regions[:count]]
    for rank, outcome in enumerate(outcomes, 1):
        written = write_region(found, outcome.region, folder, rank)
        if isinstance(written, str):
            outcome.why = f"not written: {written}"
            say(f"region {rank}: {outcome.region.name}: {outcome.why}")
            continue
        outcome.problem = written
        say(f"region {rank}: {outcome.region.name} ({100 * outcome.region.share:.1f}%): {written}")
    return outcomes


def optimize_regions(
    found: Regions,
    outcomes: list[RegionOutcome],
    summaries: dict[str, Any],
    *,
    folder: Path,
    judge: Callable[[str], Feedback],
    output: Path | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> ModelOutcome:
    """The model rebuilt from the regions' searches: ``summaries`` maps a region problem's path
    to its run's ``RunSummary``; ``judge(candidate_source)`` judges a candidate for the whole
    model (at the regions' scale). Each kernel surely faster alone is judged inside the model
    alone, the ones kept there together; when they are wrong together, the model keeps the
    best one alone."""
    for outcome in outcomes:
        summary = summaries.get(str(outcome.problem)) if outcome.problem else None
        if summary is not None:
            _searched(outcome, summary)
        elif outcome.problem is not None:
            outcome.why = "its search did not finish"
    for outcome in outcomes:
        if outcome.kernel is not None:
            _judged_inside(found, outcome, judge, say)
    kept = [outcome for outcome in outcomes if outcome.kept]
    stitched = output or folder / "stitched.py"
    model = None
    if kept:
        model = _together(found, kept, judge, say)
        kept = [outcome for outcome in kept if outcome.kept]
        source = stitched_source(found, [Winner(o.region, o.kernel or "") for o in kept])
        stitched.parent.mkdir(parents=True, exist_ok=True)
        stitched.write_text(source, encoding="utf-8")
    return ModelOutcome(found, outcomes, model, stitched if kept else None, folder)


def _together(
    found: Regions, kept: list[RegionOutcome], judge: Callable[[str], Feedback], say: Callable
) -> Feedback | None:
    """The model with every kept kernel in place, judged; wrong together (two kernels that
    are each right alone), the best kernel alone stands and the others are dropped."""
    if len(kept) == 1:
        return kept[0].inside
    say(f"the model with {len(kept)} region kernels in place: judging it")
    model = judge(stitched_source(found, [Winner(o.region, o.kernel or "") for o in kept]))
    if model.correct:
        return model
    best = max(kept, key=lambda outcome: outcome.inside.speedup if outcome.inside else 0.0)
    for outcome in kept:
        if outcome is not best:
            outcome.kept = False
            outcome.why = f"dropped: the kernels together were wrong ({model.summary()})"
    return best.inside


def _searched(outcome: RegionOutcome, summary: Any) -> None:
    """What a region's run found: its kernel when the verified program was surely faster."""
    outcome.run_id = summary.run_id
    outcome.speedup = summary.verified_speedup
    interval = summary.verified_interval
    outcome.interval = (float(interval[0]), float(interval[1])) if interval else None
    low = outcome.interval[0] if outcome.interval else None
    if summary.verified_node is None or low is None or low <= SURELY_FASTER:
        outcome.why = "no program was surely faster than the region"
        return
    outcome.kernel = Path(summary.best_program).read_text(encoding="utf-8")


def _judged_inside(
    found: Regions, outcome: RegionOutcome, judge: Callable[[str], Feedback], say: Callable
) -> None:
    """The model with this region's kernel alone in place: kept unless wrong or surely slower."""
    say(f"{outcome.region.name}: its kernel inside the model")
    feedback = judge(stitched_source(found, [Winner(outcome.region, outcome.kernel or "")]))
    outcome.inside = feedback
    if not feedback.correct:
        outcome.why = f"wrong inside the model: {feedback.summary()}"
    elif feedback.speedup_interval and feedback.speedup_interval[1] < 1.0:
        outcome.why = f"slower inside the model: {feedback.speedup:.2f}x"
    else:
        outcome.kept = True
        outcome.why = f"kept: the model at {feedback.speedup:.2f}x with it alone"
