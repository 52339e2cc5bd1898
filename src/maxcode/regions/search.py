"""A whole model made faster region by region: ``maxcode optimize MODEL.py --regions N``.

``optimize_regions`` cuts the model (``find_regions``), writes its top regions as problems,
searches each (``search``: one ordinary ``maxcode optimize`` run per region), and takes as a
region's kernel its run's verified program when that was surely faster than the region (the
low end of its interval above 1). Each kernel is then put into the model alone
(``stitch.stitched_source``) and the model judged against the original (``judge``: the
harness, as any candidate): a kernel that is wrong inside the model (other strides, aliasing,
attributes the model reads) or surely slower there is dropped, with why. The kernels kept are
stitched together and the model judged once more; that verdict is the result, beside the
speedup the regions' own speedups predict (Amdahl: ``predicted``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maxcode.regions import Region, Regions, find_regions, write_region
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
    notes: list[str] = field(default_factory=list)

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


def optimize_regions(
    problem: str | Path,
    count: int,
    *,
    folder: Path,
    search: Callable[[Path], Any],
    judge: Callable[[str], Feedback],
    scale: float = 1.0,
    device: str = "cpu",
    repeats: int = 10,
    output: Path | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> ModelOutcome:
    """Search ``problem``'s top ``count`` regions and judge the model rebuilt from their
    kernels. ``search(region_file)`` runs one search and returns its ``RunSummary``;
    ``judge(candidate_source)`` judges a candidate for the whole model (at ``scale``)."""
    found = find_regions(problem, scale=scale, device=device, repeats=repeats)
    outcomes = [RegionOutcome(region) for region in found.regions[:count]]
    for rank, outcome in enumerate(outcomes, 1):
        written = write_region(found, outcome.region, folder, rank)
        if isinstance(written, str):
            outcome.why = f"not written: {written}"
            continue
        outcome.problem = written
        say(f"region {rank}: {outcome.region.name} ({100 * outcome.region.share:.1f}%)")
        _searched(outcome, search(written))
    for outcome in outcomes:
        if outcome.kernel is not None:
            _judged_inside(found, outcome, judge, say)
    kept = [outcome for outcome in outcomes if outcome.kept]
    stitched = output or folder / "stitched.py"
    model = None
    if kept:
        source = stitched_source(found, [Winner(o.region, o.kernel or "") for o in kept])
        stitched.parent.mkdir(parents=True, exist_ok=True)
        stitched.write_text(source, encoding="utf-8")
        say(f"the model with {len(kept)} region kernel(s) in place: judging it")
        model = kept[0].inside if len(kept) == 1 else judge(source)
    return ModelOutcome(found, outcomes, model, stitched if kept else None, folder)


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
