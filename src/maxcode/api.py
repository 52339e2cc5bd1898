"""The Python face of maxcode: what the commands do, as functions.

Keyword names are the command line's long options (``--check-scale`` is ``check_scale``),
because both come from the same records (``EvalRequest`` for ``evaluate``, ``SearchConfig``
for ``optimize`` and ``bench``); a bad value or an unknown name is the same one-line
``MaxcodeError`` the command line turns into exit 2::

    import maxcode

    feedback = maxcode.evaluate("examples/cpp/io_bound_sum", "fast.cpp")
    print(feedback.speedup, feedback.speedup_interval)
    summary = maxcode.optimize("examples/cpp/io_bound_sum", depth=2, candidates=3)
    print(summary.best_speedup, summary.best_program)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from maxcode.errors import MaxcodeError, RunInterrupted

if TYPE_CHECKING:
    from maxcode.harness.settings import EvalRequest
    from maxcode.regions import Regions
    from maxcode.regions.search import ModelOutcome
    from maxcode.search.driver import RunSummary
    from maxcode.search.loop import StepReport
    from maxcode.tasks import Task
    from maxcode.types import Feedback


RESUMED_RUN_TAKES = (
    "--resume takes only --base-url, --store, --output, --json, --request-timeout and the"
    " budget limits"
)
"""Why a resumed run refuses other settings (it keeps its stored ones)."""
RESUMED_BENCH_TAKES = (
    "--resume continues a bench as it was set up: it takes only --base-url, --store and --json"
)
"""Why a resumed bench refuses other settings (its runs keep their stored ones)."""


def load_task(spec: str | Path, *, pie_tests: str | Path | None = None, scale: float = 1.0) -> Task:
    """A task: a task folder (C++ or a project), a KernelBench problem file (its sizes times
    ``scale``), or a PIE row ``FILE.jsonl#N`` (with its tests under ``pie_tests``)."""
    from maxcode.kinds.load import load_task as load

    return load(str(spec), pie_tests, scale)


def evaluate(
    task: str | Path | Task,
    candidate: str | Path,
    request: EvalRequest | None = None,
    *,
    say: Callable[[str], None] = lambda line: None,
    **settings: Any,
) -> Feedback:
    """``maxcode eval``: judge ``candidate`` against ``task`` and measure its speedup.

    ``task``: what ``load_task`` takes, or a loaded task. ``candidate``: a ``Path`` or a string
    naming a file (a folder, a diff or a bundle for a project), or the program's source as a
    string (any string with a line break). ``request``: ``EvalRequest``'s defaults when None;
    ``settings``: ``maxcode eval``'s options by name (``metric``, ``device``, ``repeats``,
    ``precision``, ``isolation``, ...), over ``request``. ``device`` ``auto``: a GPU for a
    KernelBench task when PyTorch sees one, else the CPU (``say`` is told which once the
    candidate is judged).

    ``isolation`` outside ``SAFE_LEVELS`` (what ``auto`` falls back to without bubblewrap and
    namespaces) is refused with ``UnsafeIsolation`` unless ``unsafe_isolation`` accepts it.
    The number is reported: timed to ``precision`` (the kind's ``eval_precision``, else
    ``EVAL_PRECISION``, unless given); KernelBench in rounds of fresh workers (exactly
    ``rounds`` when given)."""
    from maxcode.harness.sandbox import Sandbox
    from maxcode.harness.settings import EVAL_PRECISION, EvalRequest, with_overrides
    from maxcode.kinds import kind_of
    from maxcode.kinds.base import Occasion
    from maxcode.kinds.load import load_task as load
    from maxcode.tasks import Task

    chosen: EvalRequest = with_overrides(EvalRequest, request, settings)
    # The sandbox first: a refused level is the user's to fix before anything is loaded.
    sandbox = Sandbox(chosen.isolation, unsafe_ok=chosen.unsafe_isolation)
    loaded = task if isinstance(task, Task) else load(str(task), chosen.pie_tests, chosen.scale)
    kind = kind_of(loaded)
    prepared = kind.prepare(loaded.name, chosen)
    if isinstance(candidate, str) and "\n" in candidate:
        source = candidate
    else:
        source = kind.read_candidate(loaded, Path(candidate))
    if prepared.device == "cuda" and not chosen.compile_only:
        # Built first, on every CPU and without the GPU's turn: an evaluation holds the GPU
        # from its workers' start, and a build of torch's headers takes a minute.
        failed = kind.prebuild(loaded, source, prepared, sandbox)
        if failed is not None:
            return failed
    precision = chosen.precision or kind.eval_precision or EVAL_PRECISION
    occasion = Occasion(
        sandbox,
        reported=True,
        rounds=chosen.rounds,
        compile_only=chosen.compile_only,
        precision=precision,
    )
    feedback = kind.evaluate(loaded, source, prepared, occasion)
    note = kind.device_note(prepared.device) if chosen.device == "auto" else None
    if note:
        say(note)
    return feedback


@overload
def optimize(
    task: str | Path | None = None,
    *,
    resume: str | None = None,
    model: str | None = None,
    method: str | None = None,
    store: str | Path | None = None,
    output: str | Path | None = None,
    maxcode: bool = False,
    regions: None = None,
    on_step: Callable[[StepReport], None] = ...,
    say: Callable[[str], None] = ...,
    **settings: Any,
) -> RunSummary: ...


@overload
def optimize(
    task: str | Path | None = None,
    *,
    resume: str | None = None,
    model: str | None = None,
    method: str | None = None,
    store: str | Path | None = None,
    output: str | Path | None = None,
    maxcode: bool = False,
    regions: int,
    on_step: Callable[[StepReport], None] = ...,
    say: Callable[[str], None] = ...,
    **settings: Any,
) -> ModelOutcome: ...


def optimize(
    task: str | Path | None = None,
    *,
    resume: str | None = None,
    model: str | None = None,
    method: str | None = None,
    store: str | Path | None = None,
    output: str | Path | None = None,
    maxcode: bool = False,
    regions: int | None = None,
    on_step: Callable[[StepReport], None] = lambda report: None,
    say: Callable[[str], None] = lambda line: None,
    **settings: Any,
) -> RunSummary | ModelOutcome:
    """``maxcode optimize``: search for a faster version of ``task``'s program and return the
    run's summary (the best program is written to ``output``, by default under
    ``MAXCODE_HOME``). ``model``: ``provider/model``, or ``rules`` (offline, no key, the
    default); ``method``: ``cuda-llm`` unless given; ``store``: the run store (default
    ``MAXCODE_HOME/maxcode.db``); ``maxcode``: the MaxCode variant (``--maxcode``,
    ``maxcode.search.config.maxcode_variant``); ``settings``: the search's options (``depth``,
    ``candidates``, ``max_usd``, ``workers``, ...). The run is recorded: ``resume=RUN_ID``
    (``maxcode optimize --resume``) continues it if it stops, with only ``base_url``, the
    budgets (``max_usd``, ``max_llm_tokens``, ``max_llm_calls``) and ``request_timeout`` among
    ``settings``.

    ``regions=N``: ``task`` is a whole model (a KernelBench-format file); its top ``N``
    regions are searched, one run each with these settings, and the model rebuilt from their
    kernels is judged (``maxcode.regions.search``); returns a ``ModelOutcome``."""
    if regions is not None:
        if resume is not None or task is None:
            raise MaxcodeError("--regions takes a MODEL file and does not resume (yet)")
        return _optimize_regions(
            task, regions, model, method, store, output, maxcode, on_step, say, settings
        )
    from maxcode.kinds import check_timing_settings
    from maxcode.search.config import make_config, maxcode_variant
    from maxcode.search.driver import RESUMABLE_SETTINGS, new_run, run_search
    from maxcode.store import open_store

    base_url = settings.pop("base_url", None)
    if resume is not None:
        # A resumed run keeps its stored settings: only its endpoint, budgets and
        # request timeout may change.
        others = set(settings) - set(RESUMABLE_SETTINGS)
        if task is not None or others or model or method or maxcode:
            raise MaxcodeError(RESUMED_RUN_TAKES)
    elif task is None:
        raise MaxcodeError("name a TASK to optimize, or --resume RUN_ID")
    # Timing settings read from the environment when candidates are timed: a bad one is an
    # error now, before a run is recorded, not at the first evaluation.
    check_timing_settings()
    runs = open_store(store)
    if resume is None:
        chosen = {**settings, "base_url": base_url}
        chosen.update(
            {name: value for name, value in (("model", model), ("method", method)) if value}
        )
        config = make_config(maxcode_variant(chosen) if maxcode else chosen)
        resume = new_run(runs, str(task), config, say=say)
        say(f"run {resume}: {task} with {config.method}")
        settings = {}
    else:
        say(f"resuming run {resume}")
    try:
        return run_search(
            runs,
            resume,
            base_url=base_url,
            output=Path(output) if output is not None else None,
            on_step=on_step,
            overrides=settings,
        )
    except KeyboardInterrupt:
        raise RunInterrupted(resume) from None


def _optimize_regions(
    task: str | Path,
    count: int,
    model: str | None,
    method: str | None,
    store: str | Path | None,
    output: str | Path | None,
    maxcode: bool,
    on_step: Callable[[StepReport], None],
    say: Callable[[str], None],
    settings: dict[str, Any],
) -> ModelOutcome:
    """``optimize(task, regions=count)``: the regions' searches share every setting but the
    scale (a region's problem is written at the model's scale already)."""
    import time

    from maxcode.harness.settings import EvalRequest
    from maxcode.home import maxcode_home
    from maxcode.kinds.kernelbench.backends import resolve_device
    from maxcode.regions.search import optimize_regions

    if count < 1:
        raise MaxcodeError("--regions: at least 1")
    scale = float(settings.pop("scale", None) or 1.0)
    device = resolve_device(str(settings.get("device") or "auto"))
    judged = {
        name: value
        for name, value in settings.items()
        if name in EvalRequest.model_fields and name not in ("repeats", "precision")
    }
    path = Path(task)
    folder = maxcode_home() / "regions" / f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}"

    def search(problem: Path) -> RunSummary:
        return optimize(
            problem, model=model, method=method, store=store, maxcode=maxcode,
            on_step=on_step, say=say, **settings,
        )  # fmt: skip

    def judge(source: str) -> Feedback:
        return evaluate(path, source, scale=scale, **judged)

    return optimize_regions(
        path,
        count,
        folder=folder,
        search=search,
        judge=judge,
        scale=scale,
        device=device,
        output=Path(output) if output is not None else None,
        say=say,
    )


def bench(
    tasks: list[str | Path] | None = None,
    *,
    methods: list[str] | None = None,
    trials: int = 1,
    store: str | Path | None = None,
    resume: str | None = None,
    maxcode: bool = False,
    on_run: Callable[[RunSummary, str], None] = lambda summary, label: None,
    say: Callable[[str], None] = lambda line: None,
    **settings: Any,
) -> dict[str, Any]:
    """``maxcode bench``: run each of ``methods`` (``cuda-llm``, ``best-of-n+maxcode``, ...) on
    each task (suite folders and PIE files expand to their tasks) with the same budget, and
    return the comparison as ``maxcode bench --json`` prints it. ``maxcode``: every method's
    MaxCode variant; ``on_run``: told of each finished run with its method label;
    ``resume=BENCH_ID``: continue a bench as it was set up (only ``base_url`` may change)."""
    from maxcode.search.bench.run import new_bench, run_bench
    from maxcode.search.bench.suite import expand_suite
    from maxcode.search.bench.table import bench_json
    from maxcode.search.config import maxcode_variant
    from maxcode.store import open_store

    base_url = settings.pop("base_url", None)
    if resume is not None and (tasks or methods or settings or maxcode):
        raise MaxcodeError(RESUMED_BENCH_TAKES)
    runs = open_store(store)
    if resume is None:
        if not tasks:
            raise MaxcodeError("name the TASKS to bench: task folders, suite folders, PIE .jsonl")
        settings = {**(maxcode_variant(settings) if maxcode else settings), "base_url": base_url}
        settings.pop("method", None)
        resume = new_bench(
            runs, expand_suite([str(task) for task in tasks]), list(methods or []), settings, trials
        )
        say(f"bench {resume}: {len(tasks)} task argument(s), methods {', '.join(methods or [])}")
    try:
        run_bench(runs, resume, base_url=base_url, on_run=on_run)
    except KeyboardInterrupt:
        raise RunInterrupted(resume, "bench") from None
    return bench_json(runs, resume)


def regions(
    model: str | Path,
    *,
    device: str = "cpu",
    scale: float = 1.0,
    repeats: int = 10,
    out: str | Path | None = None,
) -> Regions:
    """``maxcode regions``: ``model``'s forward cut into regions (``maxcode.regions``), ranked
    by their share of its time; with ``out``, each region written there as a KernelBench
    problem (``Region.written``: its path, or why it could not be)."""
    from maxcode.regions import find_regions, write_region

    found = find_regions(model, scale=scale, device=device, repeats=repeats)
    if out is not None:
        for rank, region in enumerate(found.regions, 1):
            region.written = write_region(found, region, Path(out), rank)
    return found
