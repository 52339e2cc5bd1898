"""Starting and resuming runs: what ``maxcode optimize`` calls."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.executors import Executor, make_executor
from maxcode.harness.sandbox import SAFE_LEVELS, remove_scratch_of
from maxcode.home import maxcode_home
from maxcode.kinds import kind_named, kind_of
from maxcode.kinds.load import load_task
from maxcode.llm import NO_MODEL_MESSAGE, Budget, BudgetExhausted, LLMProvider, resolve_model
from maxcode.search.config import SearchConfig
from maxcode.search.critique import Critic, LLMCritic, TemplateCritic
from maxcode.search.loop import (
    Search,
    SearchOutcome,
    StepReport,
    StopRequested,
    verification_message,
)
from maxcode.search.methods import make_method
from maxcode.search.results import confirms, refutation, run_isolation, run_result
from maxcode.search.value import make_value
from maxcode.store import RunDamaged, RunRecord, RunStore, StoreError
from maxcode.store.lease import HEARTBEAT_S, this_host
from maxcode.tasks import Task

UNSAFE = "expected outputs are readable and state may survive between runs"
RESUMABLE_SETTINGS = ("max_usd", "max_llm_tokens", "max_llm_calls", "request_timeout")
"""What a resumed run may change: its budgets and the wait for one answer (a run that stopped
on a slow model resumes with a longer ``--request-timeout``)."""


@dataclass(frozen=True)
class RunSummary:
    """What ``maxcode optimize --json`` prints."""

    run_id: str
    task: str
    method: str
    status: str
    message: str
    best_speedup: float
    best_node: str | None
    best_program: str
    verified_node: str | None
    verified_speedup: float | None
    verification: list[Any]
    evaluations: int
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    trace: list[float]
    isolation: str
    """The sandbox level the run's candidates ran under."""
    unsafe_isolation: bool
    """The user accepted a level that cannot keep expected outputs private."""
    void: list[dict[str, Any]]
    """Results the integrity policy voided: node, reason, claimed speedup, isolation."""
    verified_interval: list[float] | None = None
    """95% interval of ``verified_speedup`` from its fresh measurement (None: none, or the
    reference stands)."""
    cached_prompt_tokens: int = 0
    """Of ``prompt_tokens``, those a provider's prompt cache served (billed at its cached
    price)."""
    reasoning_tokens: int = 0
    """Of ``completion_tokens``, those spent reasoning (where the provider reports them)."""

    def as_json(self) -> dict[str, Any]:
        """The summary as a JSON object."""
        return dict(self.__dict__)


def resolve_isolation(config: SearchConfig) -> SearchConfig:
    """The config with ``auto`` replaced by the level this machine gives, after the level is
    checked: one outside ``SAFE_LEVELS`` without ``unsafe_isolation`` raises
    ``UnsafeIsolation`` (exit 2) before any LLM call is paid for."""
    from maxcode.executors.base import sandbox_for

    sandbox = sandbox_for(config.isolation, config.unsafe_isolation)
    return config.model_copy(update={"isolation": sandbox.isolation})


def new_run(
    store: RunStore,
    task_spec: str,
    config: SearchConfig,
    *,
    say: Callable[[str], None] = lambda line: None,
) -> str:
    """Record a new run and return its id (the task is loaded and checked first)."""
    task = load_task(task_spec, config.pie_tests, config.scale)
    kind = kind_of(task)
    # Checked before any LLM call is paid for.
    note_device = config.device == "auto"
    config = kind.prepare(task.name, config)
    kind.ready(config)
    note = kind.device_note(config.device) if note_device else None
    make_value(config.value)
    config = resolve_isolation(config)
    if config.unsafe_isolation and config.isolation not in SAFE_LEVELS:
        say(f"warning: isolation {config.isolation} accepted with --unsafe-isolation: {UNSAFE}")
    if note:
        say(note)
    if config.model == "rules":
        say(NO_MODEL_MESSAGE)
    run_id = uuid.uuid4().hex[:12]
    stored = config.model_dump(exclude={"base_url"})
    store.create_run(run_id, task_spec, task.name, task.kind, config.method, stored)
    return run_id


def run_search(
    store: RunStore,
    run_id: str,
    *,
    base_url: str | None = None,
    output: Path | None = None,
    on_step: Callable[[StepReport], None] = lambda report: None,
    overrides: dict[str, Any] | None = None,
) -> RunSummary:
    """Run (or resume) a recorded run to its end; Ctrl-C and a spent budget stop it cleanly.

    ``overrides`` (``RESUMABLE_SETTINGS``: the budgets, the request timeout) change those of a
    resumed run; nothing else of a run's configuration may change."""
    return asyncio.run(
        run_search_async(
            store,
            run_id,
            base_url=base_url,
            output=output,
            on_step=on_step,
            overrides=overrides,
        )
    )


async def run_search_async(
    store: RunStore,
    run_id: str,
    *,
    base_url: str | None = None,
    output: Path | None = None,
    on_step: Callable[[StepReport], None] = lambda report: None,
    overrides: dict[str, Any] | None = None,
    executor: Executor | None = None,
) -> RunSummary:
    """``run_search`` inside an event loop; ``executor`` (kept open) may be shared by runs.
    The run is driven by this process alone: another live driver is refused (``RunLeased``)."""
    record = store.get_run(run_id)
    if record is None:
        raise MaxcodeError(f"no run {run_id!r} in {store.path}")
    run_id = record.run_id
    gone = store.take_lease(run_id)
    heartbeat = _Heartbeat(store, run_id)
    try:
        if gone is not None and gone.host == this_host():
            # Its driver was killed mid-evaluation: what its sandboxes left is nobody's now.
            remove_scratch_of(gone.pid)
        return await _drive(store, record, base_url, output, on_step, overrides, executor)
    finally:
        heartbeat.stop()
        try:
            store.release_lease(run_id)
        except StoreError:
            pass  # a lease left behind is a dead driver's: the next driver takes it over


class _Heartbeat:
    """Renews a run's lease every ``HEARTBEAT_S`` from a thread of its own (an evaluation that
    holds the event loop for minutes does not make its driver look dead)."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="maxcode-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_S):
            try:
                self._store.renew_lease(self._run_id)
            except StoreError:
                pass  # the process still runs: on this host that keeps the lease alive

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def _end(store: RunStore, run_id: str, status: str, message: str) -> None:
    """Record how the run ended, if the store still takes writes (a full disk may not)."""
    try:
        store.update_run(run_id, status=status, message=message)
    except StoreError:
        pass


async def _drive(
    store: RunStore,
    record: RunRecord,
    base_url: str | None,
    output: Path | None,
    on_step: Callable[[StepReport], None],
    overrides: dict[str, Any] | None,
    executor: Executor | None,
) -> RunSummary:
    run_id = record.run_id
    # A finished run resumed keeps its status whatever goes wrong while it is replayed.
    finished = (record.status, record.message) if record.status == "done" else None
    overrides = {
        key: value
        for key, value in (overrides or {}).items()
        if key in RESUMABLE_SETTINGS and value is not None
    }
    config = SearchConfig.model_validate({**record.config, **overrides, "base_url": base_url})
    task = load_task(record.task_spec, config.pie_tests, config.scale)
    if config.device == "auto":  # a run recorded before it was resolved (a bench's)
        config = config.model_copy(update={"device": kind_of(task).device("auto")})
    store.update_run(run_id, status="running", message="")
    try:
        outcome = await _search(store, run_id, task, config, on_step, executor)
    except (KeyboardInterrupt, asyncio.CancelledError, StopRequested) as stopped:
        _end(store, run_id, *(finished or ("stopped", "interrupted; resume with --resume")))
        if isinstance(stopped, StopRequested):
            raise KeyboardInterrupt from None
        raise
    except BudgetExhausted as spent:
        _end(store, run_id, "stopped", f"{spent}; resume with --resume and a larger limit")
    except (RunDamaged, StoreError) as error:
        # The store, not the search, failed: the run stops and resumes once the store is
        # repaired (space freed), and a finished run stays finished.
        _end(store, run_id, *(finished or ("stopped", f"{error}; resume with --resume")))
        raise
    except MaxcodeError as error:
        _end(store, run_id, *(finished or ("failed", str(error))))
        raise
    except BaseException as error:
        _end(store, run_id, *(finished or ("failed", f"{type(error).__name__}: {error}")))
        raise
    else:
        store.update_run(run_id, status=outcome.status, message=outcome.message)
    return summarize(store, run_id, output)


async def _search(
    store: RunStore,
    run_id: str,
    task: Task,
    config: SearchConfig,
    on_step: Callable[[StepReport], None],
    shared_executor: Executor | None,
) -> SearchOutcome:
    usage = store.usage(run_id)
    budget = None
    if config.max_usd or config.max_llm_tokens or config.max_llm_calls:
        budget = Budget(config.max_usd, config.max_llm_tokens, config.max_llm_calls)
        # Spending before a resume counts against the same budget.
        budget.calls = usage["llm_calls"]
        budget.spent_tokens = usage["prompt_tokens"] + usage["completion_tokens"]
        budget.spent_usd = usage["cost_usd"] or 0.0
    call_log = store.call_log(run_id)
    policy = resolve_model(config.model, base_url=config.base_url, budget=budget, call_log=call_log)
    critic: Critic
    critic_model = config.critic_model or config.model
    critic_provider: LLMProvider | None = None
    if critic_model == "rules":
        critic = TemplateCritic()
    else:
        critic_provider = resolve_model(
            critic_model, base_url=config.base_url, budget=budget, call_log=call_log
        )
        critic = LLMCritic(
            critic_provider,
            max_tokens=min(config.max_tokens, 1024),
            timeout=config.request_timeout,
            reasoning_effort=config.reasoning_effort,
            prompt_cache=config.prompt_cache,
        )
    value = make_value(
        config.value,
        base_url=config.base_url,
        budget=budget,
        call_log=call_log,
        replay=lambda purpose: store.find_call(run_id, purpose),
    )
    executor = shared_executor or make_executor(
        config.executor, config.workers, ray_address=config.ray_address
    )
    search = Search(
        run_id=run_id,
        task=task,
        config=config,
        store=store,
        policy=policy,
        critic=critic,
        executor=executor,
        method=make_method(config),
        on_step=on_step,
        value=value,
    )
    try:
        with _ctrl_c_stops(search):
            if shared_executor is not None:
                return await _run_and_verify(search)
            async with executor:
                return await _run_and_verify(search)
    finally:
        await policy.close()
        if critic_provider is not None:
            await critic_provider.close()
        if value is not None:
            from maxcode.rtg import GenerativeModel

            if isinstance(value, GenerativeModel):
                await value.provider.close()


@dataclass
class _CtrlC:
    """Ctrl-C for the searches one event loop runs (a bench may run several at once)."""

    loop: asyncio.AbstractEventLoop
    handler: Any
    """SIGINT's handler before the first search began, restored after the last."""
    searches: list[tuple[Search, asyncio.Task[Any] | None]]

    def interrupted(self) -> None:
        """The first Ctrl-C stops the searches once the work in flight has ended, saying
        what that is; the second cancels them, as Ctrl-C always did."""
        if any(search.stop.is_set() for search, _ in self.searches):
            self.loop.remove_signal_handler(signal.SIGINT)
            for _, task in self.searches:
                if task is not None:
                    task.cancel()
            return
        waiting = []
        for search, _ in self.searches:
            search.stop.set()
            waiting.append(search.waiting_for())
        said = " and ".join(text for text in waiting if text)
        what = f"once the {said} in flight end" if said else "now"
        print(
            f"Ctrl-C: stopping {what}, keeping their results; Ctrl-C again stops at once",
            file=sys.stderr,
            flush=True,
        )


_CTRL_C: dict[asyncio.AbstractEventLoop, _CtrlC] = {}


@contextlib.contextmanager
def _ctrl_c_stops(search: Search) -> Iterator[None]:
    """A first Ctrl-C stops ``search`` once the work in flight has ended and been recorded
    (``_CtrlC``). Only where Ctrl-C reaches this event loop: its main thread, SIGINT not set
    aside by the embedding program."""
    loop = asyncio.get_running_loop()
    entry = (search, asyncio.current_task())
    ctrl_c = _CTRL_C.get(loop)
    if ctrl_c is None:
        handler = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is not threading.main_thread() or handler in (
            signal.SIG_IGN,
            None,
        ):
            yield
            return
        ctrl_c = _CTRL_C[loop] = _CtrlC(loop, handler, [])
        loop.add_signal_handler(signal.SIGINT, ctrl_c.interrupted)
    ctrl_c.searches.append(entry)
    try:
        yield
    finally:
        ctrl_c.searches.remove(entry)
        if not ctrl_c.searches:
            del _CTRL_C[loop]
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, ctrl_c.handler)


async def _run_and_verify(search: Search) -> SearchOutcome:
    """The search, then the final re-verification of its best programs (also when a spent
    budget stopped it: verifying needs no LLM)."""
    try:
        outcome = await search.run()
    except BudgetExhausted:
        if search.config.verify:
            await search.verify()
        raise
    if search.config.verify:
        note = verification_message(await search.verify())
        if note:
            outcome.message = "; ".join(part for part in (outcome.message, note) if part)
    return outcome


def _result_node(store: RunStore, record: RunRecord) -> tuple[str | None, float | None, list[Any]]:
    """The node reported as the run's result, its verified speedup, and the verification
    log. With verification: the first confirmed node (None with speedup 1.0: the reference
    stands; a program re-measured at or below 1x is no result). Without (turned off, or the
    run stopped before it): the best node, unverified."""
    log = [
        {
            "node": node_id,
            "verified": confirms(feedback),
            "speedup": feedback.speedup,
            "speedup_interval": list(feedback.speedup_interval)
            if feedback.speedup_interval
            else None,
            "message": refutation(feedback),
            "suspect": feedback.suspect,
            "rounds": feedback.kernelbench.rounds if feedback.kernelbench else 0,
        }
        for node_id, feedback in store.verifications(record.run_id)
    ]
    result = run_result(store, record)
    if result.verified:
        return result.node, result.speedup, log
    return record.best_node_id, None, log


def summarize(store: RunStore, run_id: str, output: Path | None = None) -> RunSummary:
    """The run's summary; writes its best program to ``output`` (default: under the run's
    folder in ``MAXCODE_HOME``)."""
    record = store.get_run(run_id)
    if record is None:
        raise MaxcodeError(f"no run {run_id!r} in {store.path}")
    result_node, verified_speedup, verification = _result_node(store, record)
    source: str | None = None
    if result_node is not None:
        for node in store.nodes(record.run_id):
            if node.node_id == result_node and node.candidate_sha256:
                source = store.get_candidate(node.candidate_sha256)
    if source is None:
        source = load_task(
            record.task_spec, record.config.get("pie_tests"), record.config.get("scale", 1.0)
        ).reference
    kind = kind_named(record.task_kind)
    path = output or maxcode_home() / "runs" / record.run_id / f"best{kind.extension}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        kind.write_program(source, path)
    except OSError as error:
        print(f"warning: cannot write the best program to {path}: {error}", file=sys.stderr)
    usage = store.usage(record.run_id)
    return RunSummary(
        run_id=record.run_id,
        task=record.task_name,
        method=record.method,
        status=record.status,
        message=record.message,
        best_speedup=record.best_speedup,
        best_node=record.best_node_id,
        best_program=str(path),
        verified_node=result_node if verified_speedup is not None else None,
        verified_speedup=verified_speedup,
        verification=verification,
        evaluations=store.count_evaluations(record.run_id),
        llm_calls=usage["llm_calls"],
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        cost_usd=usage["cost_usd"],
        trace=record.trace,
        isolation=run_isolation(record),
        unsafe_isolation=record.unsafe_isolation,
        void=[result.as_json() for result in store.void_results(record.run_id)],
        verified_interval=_verified_interval(store, record) if verified_speedup else None,
        cached_prompt_tokens=usage["cached_prompt_tokens"],
        reasoning_tokens=usage["reasoning_tokens"],
    )


def _verified_interval(store: RunStore, record: RunRecord) -> list[float] | None:
    interval = run_result(store, record).interval
    return list(interval) if interval else None
