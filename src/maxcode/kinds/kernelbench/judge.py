"""The judge: the two sides' evidence compared in the parent, with its own torch, into one
verdict (``integrity.Verdict``). Checks, in order: the reference's run (``check_reference``);
the task (``task``); the candidate's run (``evidence``); each check seed's outputs, run twice
(``nondeterministic``), inputs unchanged (``inputs``), no aliasing (``aliasing``); the kept
timed outputs (``caching``, ``reused``); then the timings against clocks the candidate cannot
touch (``timing``, ``clock``), time outside the calls (``outside``, ``hidden``), ``threads``,
``parallel``, ``untracked``, ``memory``, and the speed of light on CUDA (``implausible``). The
speedup is ``stats.chunk_pair_speedup`` over the chunk pairs (``Judge._paired``).
"""

from __future__ import annotations

import re
import signal
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from maxcode.errors import TaskError
from maxcode.harness.build import bounded_diagnostics
from maxcode.harness.integrity import Verdict, isolation_flags
from maxcode.harness.sandbox import Sandbox
from maxcode.harness.stats import PairedEstimate, PairedExcess, chunk_pair_speedup, paired_excess
from maxcode.kinds.kernelbench.backends import UNTIMED, launch_findings
from maxcode.kinds.kernelbench.evidence import Ran
from maxcode.kinds.kernelbench.listener import Conversation, StampedChunks
from maxcode.kinds.kernelbench.outputs import MISSING, REUSED, Comparer
from maxcode.kinds.kernelbench.parameters import (
    CHECK_SEEDS,
    OUTSIDE_BIAS,
    PROCESS_BIAS,
    KernelBenchSettings,
)
from maxcode.kinds.kernelbench.problem import KernelBenchTask, reference_failure
from maxcode.kinds.kernelbench.roofline import cap_at_light, roofline
from maxcode.kinds.kernelbench.schedule import Round, Stopping, TimedPlan
from maxcode.kinds.kernelbench.worker.protocol import Part, Phase
from maxcode.types import ErrorKind, Feedback, ForwardProfile, TestOutcome, TimingStats

_LIMIT_KINDS: dict[str, ErrorKind] = {
    "wall": "timeout",
    "memory": "memory_limit",
    "output": "output_limit",
}
HOST_SHARE = 0.5
"""In-process timings must account for at least this share of the host time the parent saw."""
HOST_SLACK_S = 0.002
"""Host time (over all timed calls) that in-process timings may leave unexplained."""
SPAN_SLACK_S = 0.001
"""Host time per chunk that the parent's own stamping delays may add to a span."""
CHARGE_NOTE = 0.05
"""An outside-time charge above this share of the candidate's time is shown (``outside``)."""
BETWEEN_QUANTILE = 0.5
"""By the worker's CPU clock, the candidate's time between its calls is compared with this
quantile of the reference's host time there, not pair by pair: preemption pushes the
reference's below zero (``docs/measurements/kernelbench-notes.md``). Counts towards ``hidden``
only (on a CPU the reward's clock holds it)."""
CLAIM_SHORT = 0.25
"""Claims above the speedup by a clock the candidate cannot touch by more than this share are
shown (``clock``); wide, as preemption stretches the sides' claims unevenly."""
CPU_SHARE = 1.5
CPU_SLACK_S = 0.5
"""CPU time of the candidate's process tree may exceed ``CPU_SHARE`` times its busy wall time
(less its waits for its turns) by this much; more means it ran on other CPUs than its one."""
SPAN_CPU_SLACK_S = 0.0005
"""CPU time per timed chunk that the candidate's worker may spend beyond the chunk's host time."""
WAITING_CPU_SLACK_S = 0.0005
"""CPU time per turn the candidate's worker may spend waiting (an honest one is blocked)."""
OTHERS_SLACK_S = 0.005
"""CPU time the run's other processes may spend while the calls are timed (reaped children
count in whole clock ticks)."""
_FLOOR_S = 1e-7
"""The least cost per call a side is given (a ratio of nothing is no speedup)."""

Interval = tuple[float, float]


def check_reference(task: KernelBenchTask, side: Ran, timed: bool = True) -> None:
    """A reference that does not run (or whose run broke the protocol) is the task's error
    (``timed``: its timed calls must all have run too)."""
    report, result = side.report, side.sandbox
    conversation = side.conversation
    problem = side.problem or (conversation.problem if conversation is not None else None)
    ran = conversation is not None and (conversation.measured(Phase.PAIRS).complete or not timed)
    if side.ok and problem is None and ran:
        return
    if report is not None and report.stage != "ok":
        why = (report.message or "failed").splitlines()[0]
        where = _failing_frame(report.detail)
        if where:
            why = f"{why} ({where})"
    elif result.limit_hit and result.wall_s > 0:
        # A run killed at a limit breaks its conversation too: name the limit.
        why = limit_message(task, result.limit_hit)
    elif result.signal:
        # Killed from outside (the OOM killer when the machine runs out of memory).
        why = f"the reference's process was killed (signal {result.signal})"
        if result.signal == signal.SIGKILL:
            why += "; the machine may have run out of memory (try a smaller --scale)"
    elif problem is not None:
        why = problem
    else:
        why = last_line(result.stderr) or f"exit code {result.exit_code}"
    raise TaskError(reference_failure(task, why))


def limit_message(task: KernelBenchTask, limit: str) -> str:
    """What a run killed at ``limit`` is told (the reference's and the candidate's alike)."""
    if limit == "wall":
        return f"no result within {task.timeout_s:g} s (killed)"
    if limit == "memory":
        return f"memory limit ({task.memory_mb} MiB) hit"
    if limit == "output":
        return "wrote more than the file-size limit (killed)"
    return f"{limit} limit hit"


@dataclass
class Judge:
    torch: Any
    task: KernelBenchTask
    settings: KernelBenchSettings
    verdict: Verdict
    round: Round

    @classmethod
    def start(
        cls,
        torch: Any,
        task: KernelBenchTask,
        settings: KernelBenchSettings,
        digest: str,
        sandbox: Sandbox,
        round: Round | None = None,
    ) -> Judge:
        verdict = Verdict(
            task=task.name,
            metric="wall",
            isolation=sandbox.isolation,
            digest=digest,
            tests_total=CHECK_SEEDS,
            flags=isolation_flags(sandbox.isolation, sandbox.unsafe_ok),
            common={
                "device": settings.device,
                "kernelbench": {
                    "shape_scale": task.scaling.scale,
                    "backend": settings.kernel_backend(),
                },
            },
        )
        return cls(torch, task, settings, verdict, round or Round(TimedPlan(), Stopping()))

    def compile_check(self, side: Ran) -> Feedback:
        """The verdict of ``--compile-only``: built or not, nothing run, no reward."""
        early = self.run_failure(side)
        if early is not None and not early.compiled:
            return early
        if side.report is None or side.report.stage != "ok":
            message = early.error.message if early and early.error else "the check failed"
            return self.verdict.failed("compile_error", message, compiled=False)
        names = ", ".join(side.report.checked) or "none"
        self.verdict.flag(
            "compile-only", f"extensions compiled ({names}); nothing was run, so no reward"
        )
        return self.verdict.unmeasured(False, 0)

    def judge(self, reference: Ran, candidate: Ran) -> Feedback:
        """The verdict on ``candidate`` against ``reference`` (a reference that ran)."""
        self.round.compare_with(Comparer(self.torch, self.settings.tolerance))
        for found in self.round.checked.findings():
            self.verdict.flag("task", found)
        early = self.run_failure(candidate)
        if early is not None:
            return early
        assert candidate.report is not None
        if self.settings.kernel_backend() == "triton":
            for found in launch_findings(candidate.report):
                self.verdict.flag("backend", found)
        outcomes = self._seed_outcomes(candidate)
        failures = [outcome for outcome in outcomes if outcome.status != "passed"]
        if failures:
            first = failures[0]
            return self.verdict.failed(
                "wrong_answer",
                f"seed {first.index}: {first.detail}",
                tests_passed=len(outcomes) - len(failures),
                tests=outcomes,
            )
        if not self.settings.timed:
            self.verdict.flag("interpreted", UNTIMED)
            return self.verdict.unmeasured(True, len(outcomes), tests=outcomes)
        timed = self._timed_outputs(candidate)
        if timed is not None:
            return self.verdict.failed(
                "wrong_answer", timed, tests_passed=CHECK_SEEDS, tests=outcomes
            )
        return self._timed(reference, candidate, outcomes)

    def run_failure(self, candidate: Ran) -> Feedback | None:
        """The verdict when the candidate's run left no complete evidence (None when it did);
        malformed evidence is an ``evidence`` finding, never a crash or a task error."""
        report, result = candidate.report, candidate.sandbox
        failed = self.verdict.failed
        if report is not None and report.stage == "compile_error":
            detail = report.detail or report.message
            return failed(
                "compile_error",
                _first_error(report.message, detail),
                compiled=False,
                compile_output=bounded_diagnostics(detail),
            )
        if result.limit_hit in _LIMIT_KINDS:
            kind = _LIMIT_KINDS[result.limit_hit]
            return failed(kind, limit_message(self.task, result.limit_hit))
        conversation = candidate.conversation
        broken = candidate.problem or (conversation.problem if conversation else None)
        if report is not None and report.stage == "channel_error":
            broken = broken or report.message
        if broken is not None:
            self.verdict.flag("evidence", broken)
            return failed("runtime_error", f"no trustworthy evidence: {broken}"[:500])
        if candidate.ok:
            return None
        if report is not None:
            message = report.message or "failed"
            return failed("runtime_error", message.splitlines()[0][:500])
        signal_part = f"signal {result.signal}" if result.signal else f"exit {result.exit_code}"
        why = last_line(result.stderr)
        return failed("runtime_error", f"the candidate's process died ({signal_part}) {why}")

    def _seed_outcomes(self, candidate: Ran) -> list[TestOutcome]:
        """Each check seed's outputs, inputs and second run against the reference's."""
        assert candidate.report is not None
        outcomes = []
        for number in range(CHECK_SEEDS):
            seed = self.round.checked.verdicts[number]
            problem = seed.check
            if problem is None and number in candidate.report.aliased:
                self.verdict.flag("aliasing", "the output shares memory with an input")
                problem = "the output shares memory with an input (return a new tensor)"
            if problem is None and seed.inputs is not None:
                self.verdict.flag("inputs", seed.inputs[0])
                problem = seed.inputs[1]
            if problem is None and seed.again is not None:
                self.verdict.flag(
                    "nondeterministic", f"seed {number} was right once and wrong when run again"
                )
                problem = f"second run: {seed.again}"
            outcomes.append(
                TestOutcome(
                    index=number,
                    status="passed" if problem is None else "wrong_answer",
                    detail=problem or "",
                )
            )
        return outcomes

    def _timed_outputs(self, candidate: Ran) -> str | None:
        """The kept timed outputs against the reference's (a problem or None)."""
        assert candidate.conversation is not None
        if not candidate.conversation.measured(Phase.PAIRS).complete:
            self.verdict.flag("evidence", "the candidate's timed calls did not all run")
            return "the outputs of the timed calls are missing"
        for position, problem in self.round.kept.verdicts(self.round.plan.positions()):
            if problem == MISSING:
                self.verdict.flag("evidence", f"no output of timed call {position + 1}")
                return "the outputs of the timed calls are missing"
            if problem == REUSED:
                self.verdict.flag("reused", f"timed call {position + 1}: {REUSED}")
                return f"timed call {position + 1}: {problem}"
            if problem is not None:
                self.verdict.flag(
                    "caching",
                    "a timed call's output differs from the reference (outputs must be "
                    "computed on every call)",
                )
                return f"timed call {position + 1}: {problem}"
        return None

    def _timed(self, reference: Ran, candidate: Ran, outcomes: list[TestOutcome]) -> Feedback:
        """The verdict of a correct candidate: its speedup by a clock it cannot touch, charged
        for time outside its calls, capped at the speed of light."""
        theirs, ours = _conversations(reference, candidate)
        calls = ours.measured(Phase.PAIRS).times
        trials = self.round.plan.trials
        if len(calls) != trials or not calls:
            self.verdict.flag("evidence", f"{len(calls)} timings reported for {trials} timed calls")
            return self.verdict.failed(
                "runtime_error",
                "the candidate's timings are missing",
                tests_passed=CHECK_SEEDS,
                tests=outcomes,
            )
        timings = _timings(theirs, ours)
        reference_cost = max(timings["reference"].median_s, _FLOOR_S)
        paired = self._paired(reference, candidate)
        speedup = max(paired.speedup, 1e-12)
        interval = None
        if paired.low is not None and paired.high is not None:
            interval = (paired.low, paired.high)
        excesses = self._host_check(reference, candidate, timings)
        speedup, interval, candidate_cost = self._charge_outside(
            excesses, speedup, interval, reference_cost
        )
        self._resources(candidate)
        self._huge_pages(theirs, ours)
        assert reference.report is not None
        light = roofline(reference.report.roofline, candidate_cost)
        measured = speedup
        if light is not None and self.settings.device == "cuda":
            speedup, light = cap_at_light(self.verdict, speedup, reference_cost, light)
        if interval is not None and speedup < measured:
            interval = (min(interval[0], speedup), speedup)  # capped with the reward
        self.verdict.implausible(speedup, "eager")
        vs_compile = None
        if "compile" in timings:
            vs_compile = max(timings["compile"].median_s, _FLOOR_S) / candidate_cost
        return self.verdict.make(
            compiled=True,
            correct=True,
            speedup=speedup,
            reference_cost=reference_cost,
            candidate_cost=reference_cost / speedup,
            tests_passed=len(outcomes),
            tests=outcomes,
            reference_costs=[reference_cost],
            candidate_costs=[reference_cost / speedup],
            repeats=len(calls),
            speedup_interval=interval,
            kernelbench={"timings": timings, "speedup_vs_compile": vs_compile, "roofline": light},
            **self._profiles(reference, candidate),
        )

    def _paired(self, reference: Ran, candidate: Ran) -> PairedEstimate:
        """The speedup from the chunk pairs by a clock the candidate cannot touch, less the
        harness's own cost per call: on a CPU the worker's CPU clock between the markers (another
        program's time is in neither side's), on a GPU the parent's host time (the worker waits
        for the whole device). Claims above it by ``CLAIM_SHORT`` are shown (``clock``)."""
        theirs_side, ours_side = _conversations(reference, candidate)
        theirs_pairs, ours_pairs = (
            theirs_side.measured(Phase.PAIRS),
            ours_side.measured(Phase.PAIRS),
        )
        identity = theirs_side.measured(Phase.IDENTITY)
        claimed = chunk_pair_speedup(theirs_pairs.chunk_times, ours_pairs.chunk_times)
        if self.settings.device == "cpu":
            ours, theirs = ours_pairs.rates("cpu"), theirs_pairs.rates("cpu")
            between = (identity.outside("cpu") or {}).get(Part.BETWEEN, [])
            loop = max(min(between, default=0.0), 0.0)
            clock = "the worker's CPU clock"
        else:
            ours, theirs = ours_pairs.rates("host"), theirs_pairs.rates("host")
            loop = identity.least_per_call() or 0.0
            clock = "the parent's clock"
        if not ours or not theirs:
            return claimed.with_process_bias(PROCESS_BIAS)
        by_clock = chunk_pair_speedup(
            [[max(rate - loop, 0.0)] for rate in theirs], [[max(rate - loop, 0.0)] for rate in ours]
        )
        if by_clock.speedup > 0 and claimed.speedup > by_clock.speedup * (1 + CLAIM_SHORT):
            self.verdict.flag(
                "clock",
                f"the in-process timings claim {claimed.speedup:.2f}x, {clock} over the same "
                f"calls {by_clock.speedup:.2f}x: that clock's is the reward",
            )
        return by_clock.with_process_bias(PROCESS_BIAS)

    def _host_check(
        self, reference: Ran, candidate: Ran, timings: dict[str, TimingStats]
    ) -> dict[Part, dict[str, PairedExcess]]:
        """The claims against the markers (``_clock_lie``: void when they lie), then each
        ``Part`` of the spans outside the calls against the reference's pair by pair, by host
        time (work of any kind) and the worker's CPU time (less noise): the excesses per call
        for ``_charge_outside`` (none when void; on a CPU not ``BETWEEN``, which ``_paired``'s
        clock holds). No stamps, no reward."""
        theirs_side, ours_side = _conversations(reference, candidate)
        theirs, ours = theirs_side.measured(Phase.PAIRS), ours_side.measured(Phase.PAIRS)
        calls, window = timings["candidate"].trials, timings["candidate"].host_s
        spans = {
            "host time": (theirs.outside("host"), ours.outside("host")),
            "CPU time": (theirs.outside("cpu"), ours.outside("cpu")),
        }
        if window is None or None in spans["host time"]:
            self.verdict.flag("timing", "no host time stamps from the candidate's timed calls")
            return {}
        if None in spans["CPU time"]:
            self.verdict.flag("timing", "the workers' CPU clocks could not be read")
            return {}
        # Chunk means of the claims (as the speedup counts the work), median over the chunks.
        means = [sum(times) / len(times) for times in ours.chunk_times if times]
        claimed = statistics.median(means or [0.0])
        lie = self._clock_lie(theirs_side.measured(Phase.IDENTITY), ours, claimed, window, calls)
        if lie is not None:
            self.verdict.flag("timing", f"in-process timings disagree with {lie}")
            return {}
        theirs_cpu, theirs_host = spans["CPU time"][0], spans["host time"][0]
        between = Part.BETWEEN
        if theirs_cpu is not None and theirs_host is not None and theirs_host[between]:
            typical = _quantile(theirs_host[between], BETWEEN_QUANTILE)
            theirs_cpu[between] = [typical] * len(theirs_cpu[between])
        excesses = {
            part: {
                clock: paired_excess(before[part], after[part], OUTSIDE_BIAS)
                for clock, (before, after) in spans.items()
                if before is not None and after is not None  # (checked above; for mypy)
            }
            for part in Part
        }
        self._hidden(excesses, claimed, calls)
        if self.settings.device == "cpu":
            del excesses[between]
        return excesses

    def _hidden(
        self, excesses: dict[Part, dict[str, PairedExcess]], claimed: float, calls: int
    ) -> None:
        """Work surely outside the calls (per part the larger 95% low end, summed) beyond what
        they claim is void (``hidden``)."""
        lows = {
            part: max((e.low for e in by_clock.values() if e.low), default=0.0)
            for part, by_clock in excesses.items()
        }
        hidden = sum(max(low, 0.0) for low in lows.values())
        if _too_fast(
            claimed, claimed + hidden, calls, SPAN_SLACK_S / max(self.round.plan.chunk, 1)
        ):
            said = ", ".join(f"{part} {low * 1e3:.3f} ms" for part, low in lows.items() if low > 0)
            self.verdict.flag(
                "hidden",
                "work outside the timed calls: the candidate spent surely at least "
                f"{hidden * 1e3:.3f} ms per call more than the reference ({said}; the 95% "
                f"intervals' low ends), beside the {claimed * 1e3:.3f} ms it claimed",
            )

    def _clock_lie(
        self,
        identity: StampedChunks,
        timed: StampedChunks,
        claimed: float,
        window: float,
        calls: int,
    ) -> str | None:
        """The clock the claimed seconds per call disagree with (``_too_fast``), in words, or
        None: on a CPU the worker's CPU clock net of the harness's own (a loaded parent stamps
        late), on a GPU host time (kernels run on no CPU clock)."""
        if self.settings.device == "cpu":
            theirs, ours = identity.rates("cpu"), timed.rates("cpu")
            if not ours:
                return "the worker's CPU clock: it could not be read"
            seen = max(statistics.median(ours) - min(theirs or [0.0]), 0.0)
            if _too_fast(claimed, seen, calls, 0.0):
                return (
                    f"the worker's CPU clock ({claimed * 1e3:.3f} ms claimed, "
                    f"{seen * 1e3:.3f} ms of CPU time per call)"
                )
            return None
        if _too_fast(claimed, window, calls, 0.0):
            return (
                f"host time ({claimed * 1e3:.3f} ms claimed, {window * 1e3:.3f} ms seen per call)"
            )
        return None

    def _charge_outside(
        self,
        excesses: dict[Part, dict[str, PairedExcess]],
        speedup: float,
        interval: Interval | None,
        reference_cost: float,
    ) -> tuple[float, Interval | None, float]:
        """The speedup, interval and cost charged for time outside the calls beyond the
        reference's: per part, by the clock that sees more, the estimate when surely above 0;
        the interval's low end (what selection uses) always."""
        candidate_cost = reference_cost / speedup
        if not excesses:
            return speedup, interval, candidate_cost

        def charged(rate: float, seconds: float) -> float:
            return reference_cost / (reference_cost / max(rate, 1e-12) + max(seconds, 0.0))

        cost = likely_cost = 0.0
        likely: tuple[Part, str, PairedExcess] | None = None
        parts = []
        for part, by_clock in excesses.items():
            sure = [e.seconds for e in by_clock.values() if e.low is not None and e.low > 0]
            charge = max(sure, default=0.0)
            cost += charge
            if charge > 0:
                parts.append(f"{part} {charge * 1e3:.3f} ms")
            clock, most = max(by_clock.items(), key=lambda item: item[1].seconds)
            likely_cost += max(most.seconds, 0.0)
            if likely is None or most.seconds > likely[2].seconds:
                likely = (part, clock, most)
        speedup, candidate_cost = charged(speedup, cost), candidate_cost + cost
        if interval is not None:
            interval = (charged(interval[0], likely_cost), charged(interval[1], cost))
        if cost > CHARGE_NOTE * candidate_cost:
            self.verdict.flag(
                "outside",
                f"{cost * 1e3:.3f} ms per call outside the timed calls beyond the "
                f"reference's ({', '.join(parts)}), added to the candidate's time",
            )
        elif likely is not None and likely_cost > candidate_cost:
            part, clock, excess = likely
            self.verdict.flag(
                "outside",
                f"{likely_cost * 1e3:.3f} ms per call outside the timed calls beyond the "
                f"reference's, more than the {candidate_cost * 1e3:.3f} ms the calls took, "
                f"but not surely above 0 ({part}, {clock}: {_interval_ms(excess)}): added "
                "to the low end of the speedup's interval only",
            )
        return speedup, interval, candidate_cost

    def _resources(self, candidate: Ran) -> None:
        """Threads the candidate started, CPU time beyond its one CPU or off the timing CPU,
        other processes."""
        report, result, conversation = candidate.report, candidate.sandbox, candidate.conversation
        assert report is not None
        before, after = report.threads_before or 0, report.threads_after or 0
        if after > before:
            self.verdict.flag(
                "threads", f"the candidate started {after - before} thread(s) while timed"
            )
        if report.torch_threads_after != report.torch_threads_before:
            self.verdict.flag(
                "threads",
                "the candidate changed torch's thread count "
                f"({report.torch_threads_before} -> {report.torch_threads_after})",
            )
        # On CUDA the driver's threads run beside the calls.
        if conversation is not None and self.settings.device == "cpu":
            self._one_cpu(conversation.measured(Phase.PAIRS))
            if conversation.strayed:
                self.verdict.flag(
                    "cpu",
                    f"at the end of {conversation.strayed} timed chunk(s) a thread of the "
                    "candidate's process could run on other CPUs than the timing CPU (the "
                    "reference's ran on the timing CPU alone)",
                )
        others = conversation.others_s() if conversation else None
        if others is not None and others > OTHERS_SLACK_S:
            self.verdict.flag(
                "untracked",
                f"{others * 1e3:.1f} ms of CPU time in the run's other processes while its "
                "calls were timed (work outside the worker's clocks)",
            )
        waited = conversation.waited_ns / 1e9 if conversation else 0.0
        busy = max(result.wall_s - waited, 0.0)
        if result.cpu_s > CPU_SHARE * busy + CPU_SLACK_S:
            self.verdict.flag(
                "parallel",
                f"{result.cpu_s:.2f} s of CPU time in {busy:.2f} s of wall time spent other than "
                "waiting for its turns (the run is given one CPU)",
            )

    def _one_cpu(self, timed: StampedChunks) -> None:
        """On a CPU: no more CPU time than host time in its chunks, none while it waited."""
        chunks = len(timed.chunks)
        cpu, host = timed.span_cpu() or (0.0, 0.0)
        if cpu > host + SPAN_CPU_SLACK_S * max(chunks, 1):
            self.verdict.flag(
                "parallel",
                f"the candidate's process spent {cpu * 1e3:.1f} ms of CPU time in "
                f"{host * 1e3:.1f} ms of timed chunks (seeds to outputs): it ran on more "
                "than its one CPU",
            )
        # While it waits, the reference's chunk runs on the same CPU.
        waiting = timed.waiting_cpu_s
        if waiting is not None and waiting > WAITING_CPU_SLACK_S * (chunks + 1):
            self.verdict.flag(
                "parallel",
                f"the candidate's process spent {waiting * 1e3:.1f} ms of CPU time while "
                "it waited for its turns (the reference's calls ran then, on the same CPU)",
            )

    def _huge_pages(self, reference: Conversation, candidate: Conversation) -> None:
        """A candidate that turned transparent huge pages back on (worker
        ``layout.no_huge_pages``), or hid what it holds, ran on memory the reference was not."""
        theirs, ours = reference.huge_pages, candidate.huge_pages
        if theirs is None or ours is None:
            return
        if ours.enabled and theirs.enabled is False:
            self.verdict.flag(
                "memory", "the candidate turned transparent huge pages back on for its process"
            )
        elif ours.held_kb:
            self.verdict.flag(
                "memory", f"the candidate's process held {ours.held_kb} kB on huge pages"
            )
        elif ours.held_kb is None and theirs.held_kb is not None:
            self.verdict.flag(
                "memory",
                "the candidate's memory map could not be read (the reference's could): "
                "its huge pages are unknown",
            )

    def _profiles(self, reference: Ran, candidate: Ran) -> dict[str, Any]:
        """The two forwards under ``torch.profiler``, when asked for and reported."""
        profiles = {}
        profile_seconds = None
        if self.settings.profile:
            spent = [side.report.profile_seconds for side in (reference, candidate) if side.report]
            profile_seconds = sum(float(s) for s in spent if s is not None)
        for name, side in (("reference", reference), ("candidate", candidate)):
            try:
                profiles[name] = ForwardProfile.model_validate(side.report and side.report.profile)
            except ValidationError:
                continue  # not asked for, or a candidate that broke its own report
        return {"profiles": profiles, "profile_seconds": profile_seconds}


def _conversations(reference: Ran, candidate: Ran) -> tuple[Conversation, Conversation]:
    assert reference.conversation is not None and candidate.conversation is not None
    return reference.conversation, candidate.conversation


def _timings(reference: Conversation, candidate: Conversation) -> dict[str, TimingStats]:
    """Per-call statistics of the sides' timed calls (host time net of the identity model's
    least) and of the reference's baselines."""
    eager, timed = reference.measured(Phase.PAIRS), candidate.measured(Phase.PAIRS)
    identity, compiled = reference.measured(Phase.IDENTITY), reference.measured(Phase.COMPILE)
    overhead = identity.least_per_call() or 0.0
    timings = {
        "reference": _stats(eager.times, _net(eager.per_call(), overhead)),
        "candidate": _stats(timed.times, _net(timed.per_call(), overhead)),
    }
    if compiled.times:
        timings["compile"] = _stats(compiled.times, None)
    if identity.times:
        timings["harness"] = _stats(identity.times, None)
    return timings


def _too_fast(claimed: float, host: float, calls: int, noise: float) -> bool:
    """``claimed`` explains less than ``HOST_SHARE`` of ``host`` per call, by more than the
    noise per call and the slack over all calls."""
    unexplained = host - claimed
    return (
        claimed < HOST_SHARE * host
        and unexplained > noise
        and unexplained * max(calls, 1) >= HOST_SLACK_S
    )


def _quantile(values: list[float], share: float) -> float:
    """The value ``share`` of the way up ``values`` sorted (the nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _interval_ms(excess: PairedExcess) -> str:
    """The excess's interval in words, in milliseconds per call."""
    if excess.low is None or excess.high is None:
        return "too few pairs for an interval"
    return f"95% interval {excess.low * 1e3:.3f} to {excess.high * 1e3:.3f} ms"


def _net(host: float | None, overhead: float) -> float | None:
    return None if host is None else max(host - overhead, 0.0)


def _stats(samples: list[float], host: float | None) -> TimingStats:
    ordered = sorted(samples)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [0.0, 0.0, 0.0]
    return TimingStats(
        median_s=statistics.median(ordered),
        spread_s=quartiles[2] - quartiles[0],
        trials=len(ordered),
        host_s=host,
    )


def _first_error(message: str, detail: str) -> str:
    for line in detail.splitlines():
        if "error" in line.lower() and ("candidate" in line or ".cpp" in line or ".cu" in line):
            return line.strip()[:500]
    return (message.splitlines()[0] if message else "the candidate failed to build")[:500]


def _failing_frame(detail: str) -> str:
    """``file:line`` of the innermost frame of a worker's traceback ('' when there is none)."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', detail)
    if not frames:
        return ""
    path, line = frames[-1]
    return f"at {Path(path).name}:{line}" if "maxcode-kb-job" in path else f"at {path}:{line}"


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""
