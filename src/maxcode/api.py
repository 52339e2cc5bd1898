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
    from maxcode.store import BenchRecord, RunStore
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
MODEL_BUDGETS = ("max_usd", "max_llm_tokens", "max_llm_calls")
"""The budgets ``--regions`` shares out among the regions' runs (``max_evals`` is each's)."""


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
    resume: None = None,
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
    resume: None = None,
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
    regions: int | None = None,
    on_step: Callable[[StepReport], None] = ...,
    say: Callable[[str], None] = ...,
    **settings: Any,
) -> RunSummary | ModelOutcome: ...


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
    regions are searched, one run each with these settings (side by side: ``concurrency``,
    by default ``N``), and the model rebuilt from their kernels is judged
    (``maxcode.regions.search``); returns a ``ModelOutcome``. Its runs are one stored bench,
    and ``resume=BENCH_ID`` continues it (and returns a ``ModelOutcome``)."""
    from maxcode.store import open_store

    # Opened first only to tell a model's search from a run: a bad setting is refused before
    # anything is written (timing settings below, a model that does not run at its probe).
    runs = open_store(store) if resume is not None else None
    regions_bench = _regions_bench(runs, resume) if runs is not None and resume else None
    if regions is not None or regions_bench is not None:
        if runs is not None and regions_bench is None:
            raise MaxcodeError(f"{resume!r} is no model's search in {runs.path}")
        others = set(settings) - {"base_url"}
        if resume is not None and (task is not None or model or method or maxcode or others):
            raise MaxcodeError(RESUMED_BENCH_TAKES)
        if resume is None and task is None:
            raise MaxcodeError("--regions: name the MODEL file")
        return _optimize_regions(
            task, regions or 0, regions_bench, model, method, runs or store, output, maxcode, say,
            settings,
        )  # fmt: skip
    from maxcode.kinds import check_timing_settings
    from maxcode.search.config import make_config, maxcode_variant
    from maxcode.search.driver import RESUMABLE_SETTINGS, new_run, run_search

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
    runs = runs or open_store(store)
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


def _regions_bench(runs: RunStore, resume: str) -> BenchRecord | None:
    """The stored whole-model search ``resume`` names, if it names one (not a run)."""
    try:
        if runs.get_run(resume) is not None:
            return None
        bench = runs.get_bench(resume)
    except MaxcodeError:  # an ambiguous prefix: the run's own path says so
        return None
    return bench if bench is not None and "regions" in bench.config else None


def _optimize_regions(
    task: str | Path | None,
    count: int,
    resumed: BenchRecord | None,
    model: str | None,
    method: str | None,
    store: RunStore | str | Path | None,
    output: str | Path | None,
    maxcode: bool,
    say: Callable[[str], None],
    settings: dict[str, Any],
) -> ModelOutcome:
    """``optimize(task, regions=count)``: the regions' searches are one stored bench (one
    method, one trial each), run side by side, sharing every setting but the scale (a region's
    problem is written at the model's scale already); ``resumed`` is such a bench, continued
    and its model judged; ``store`` the store it is in (opened once the model has run)."""
    from maxcode.harness.settings import EvalRequest
    from maxcode.regions.search import optimize_regions, write_problems
    from maxcode.search.bench.run import run_bench
    from maxcode.search.driver import summarize
    from maxcode.store import RunStore, open_store

    base_url = settings.pop("base_url", None)
    found, count, folder, bench_id, settings, output = _model_to_search(
        task, count, resumed, settings, output, say
    )
    runs = store if isinstance(store, RunStore) else open_store(store)
    outcomes = write_problems(found, count, folder, say)
    problems = [str(outcome.problem) for outcome in outcomes if outcome.problem]
    if bench_id is None and problems:
        plan = {
            "model": str(found.problem.resolve()),
            "scale": found.scale,
            "device": found.device,
            "count": count,
            "folder": str(folder),
            "output": str(output) if output is not None else None,
            "report": found.report,
            "source": found.source,
        }
        chosen = {**settings, "base_url": base_url, **({"model": model} if model else {})}
        bench_id = _new_regions_bench(runs, problems, chosen, method, maxcode, plan)
        say(f"bench {bench_id}: {len(problems)} region search(es); maxcode optimize --resume"
            f" {bench_id} continues them")  # fmt: skip
    summaries: dict[str, Any] = {}
    if bench_id is not None:
        try:
            run_bench(runs, bench_id, base_url=base_url, on_run=lambda summary, label: say(
                f"{summary.task}: run {summary.run_id} done, best {summary.best_speedup:.2f}x"
            ))  # fmt: skip
        except KeyboardInterrupt:
            raise RunInterrupted(bench_id) from None
        summaries = {
            run.task_spec: summarize(runs, run.run_id)
            for run in runs.bench_runs(bench_id)
            if run.status not in ("pending", "running")
        }
    judged = {
        name: value
        for name, value in settings.items()
        if name in EvalRequest.model_fields and name not in ("repeats", "precision", "scale")
    }

    def judge(source: str) -> Feedback:
        return evaluate(found.problem, source, scale=found.scale, **judged)

    outcome = optimize_regions(
        found,
        outcomes,
        summaries,
        folder=folder,
        judge=judge,
        output=Path(output) if output is not None else None,
        say=say,
    )
    outcome.bench_id = bench_id
    stored = runs.get_bench(bench_id) if bench_id is not None else None
    if stored is not None:  # the model's verdict, for the report
        plan = {**stored.config["regions"], "outcome": outcome.as_json()}
        runs.set_bench_config(stored.bench_id, {**stored.config, "regions": plan})
    return outcome


def _model_to_search(
    task: str | Path | None,
    count: int,
    resumed: BenchRecord | None,
    settings: dict[str, Any],
    output: str | Path | None,
    say: Callable[[str], None],
) -> tuple[Regions, int, Path, str | None, dict[str, Any], str | Path | None]:
    """A new model's regions (probed now, problems to go under ``MAXCODE_HOME/regions``), or a
    stopped search's (``resumed``: cut again from its stored probe report): the regions, how
    many to search, their folder, the bench (None: not recorded yet), the settings and ``-o``."""
    import time

    from maxcode.home import maxcode_home
    from maxcode.kinds.kernelbench.backends import resolve_device
    from maxcode.regions import cut_regions, find_regions

    if resumed is None:
        if count < 1:
            raise MaxcodeError("--regions: at least 1")
        path = Path(str(task))
        scale = float(settings.pop("scale", None) or 1.0)
        device = resolve_device(str(settings.get("device") or "auto"))
        found = find_regions(path, scale=scale, device=device)
        folder = maxcode_home() / "regions" / f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        return found, count, folder, None, settings, output
    plan = resumed.config["regions"]
    found = cut_regions(
        Path(plan["model"]), plan["scale"], plan["device"], plan["report"], plan["source"]
    )
    say(f"resuming the regions of {plan['model']}: bench {resumed.bench_id}")
    folder, settings = Path(plan["folder"]), dict(resumed.config)
    return found, int(plan["count"]), folder, resumed.bench_id, settings, output or plan["output"]


def _new_regions_bench(
    runs: RunStore,
    problems: list[str],
    settings: dict[str, Any],
    method: str | None,
    maxcode: bool,
    plan: dict[str, Any],
) -> str:
    """The bench of a model's region searches: one run per problem with ``method``, side by
    side (``concurrency``: all of them unless given), the model's budgets shared out among
    them, and ``plan`` (the model, its cut, where the problems are) stored with it."""
    from maxcode.search.bench.run import new_bench
    from maxcode.search.config import SearchConfig, maxcode_variant

    chosen = {"concurrency": len(problems), **settings}
    for name in MODEL_BUDGETS:
        if chosen.get(name):
            share = chosen[name] / len(problems)
            chosen[name] = share if name == "max_usd" else max(1, int(share))
    label = method or str(SearchConfig.model_fields["method"].default)
    if maxcode:
        chosen, label = maxcode_variant(chosen), f"{label}+maxcode"
    return new_bench(runs, problems, [label], chosen, 1, extra={"regions": plan})


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
    if resume is not None and _regions_bench(runs, resume) is not None:
        raise MaxcodeError(
            f"{resume} is a whole model's search: maxcode optimize --resume {resume}"
        )
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
