"""The judge: the reference's and the candidate's evidence compared in the parent, with the
parent's own torch, into one verdict (``integrity.Verdict``, which applies the policy).

Checks, in order: the task itself (``task`` warnings); the candidate's run (compile error,
limits, missing or malformed evidence: ``evidence``); every check seed's outputs within the
dtype's tolerance, run twice (``nondeterministic``), inputs unchanged (``inputs``), no output
sharing an input's memory (``aliasing``); every kept timed output (``caching``); then the
timings: claims against the parent's stamps (``timing``; time outside the calls beyond the
reference's is charged, ``outside``), ``threads``, CPU time beyond one CPU (``parallel``),
other processes' CPU time (``untracked``), huge pages (``memory``), and the speed of light on
CUDA (``implausible``, capped).

The speedup is ``stats.chunk_pair_speedup`` over the chunk pairs (``Judge._paired``) with its
95% interval; the candidate's cost is the reference's median over it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from maxcode.harness.build import bounded_diagnostics
from maxcode.harness.integrity import Verdict, isolation_flags
from maxcode.harness.sandbox import Sandbox
from maxcode.harness.stats import PairedEstimate, PairedExcess, chunk_pair_speedup, paired_excess
from maxcode.kinds.kernelbench.backends import UNTIMED, launch_findings
from maxcode.kinds.kernelbench.outputs import MISSING, REUSED, Comparison
from maxcode.kinds.kernelbench.problem import KernelBenchTask
from maxcode.kinds.kernelbench.roofline import cap_at_light, roofline
from maxcode.kinds.kernelbench.runner import Ran, last_line, limit_message
from maxcode.kinds.kernelbench.schedule import TimedPlan
from maxcode.kinds.kernelbench.settings import (
    CHECK_SEEDS,
    OUTSIDE_BIAS,
    PROCESS_BIAS,
    KernelBenchSettings,
)
from maxcode.kinds.kernelbench.worker.protocol import Part, Phase
from maxcode.types import ErrorKind, Feedback, ForwardProfile, TestOutcome, TimingStats

_LIMIT_KINDS: dict[str, ErrorKind] = {
    "wall": "timeout",
    "memory": "memory_limit",
    "output": "output_limit",
}
"""The error a candidate killed at a sandbox limit gets (``limit_message`` words it)."""
HOST_SHARE = 0.5
"""In-process timings must account for at least this share of the host time the parent saw."""
HOST_SLACK_S = 0.002
"""Host time (over all timed calls) that in-process timings may leave unexplained."""
SPAN_SLACK_S = 0.001
"""Host time per chunk that two spans may differ by for the parent's own stamping delays."""
CHARGE_NOTE = 0.05
"""An outside-time charge above this share of the candidate's charged time is shown
(``outside``)."""
BETWEEN_QUANTILE = 0.5
"""By the worker's CPU clock, the candidate's time between its calls is compared with this
quantile of the reference's host time there, not pair by pair: the claims are wall time, so
preemption pushes the reference's CPU time between calls below zero, which would void honest
candidates (``docs/measurements/kernelbench-notes.md``). Not charged on a CPU (the reward's clock
holds it); it counts towards ``hidden``."""
CLAIM_SHORT = 0.25
"""In-process timings that give the candidate more than this share above the speedup by the
worker's CPU clock are shown (``clock``); wide, as preemption stretches the sides' claims
unevenly."""
CPU_SHARE = 1.5
CPU_SLACK_S = 0.5
"""CPU time of the candidate's process tree may exceed ``CPU_SHARE`` times its busy wall time
(less its waits for its turns) by this much; more means it ran on other CPUs than its one."""
SPAN_CPU_SLACK_S = 0.0005
"""CPU time of the candidate's worker per timed chunk may exceed the chunk's host time by this
much (on one CPU it cannot exceed it at all)."""
WAITING_CPU_SLACK_S = 0.0005
"""CPU time the candidate's worker may spend per turn it waited for, while the reference's chunk
ran; an honest worker is blocked throughout (``Conversation._settled``)."""
OTHERS_SLACK_S = 0.005
"""CPU time the run's other processes may spend while the calls are timed (the reference's run
has none; children it reaped are counted in whole clock ticks)."""


@dataclass
class Judge:
    torch: Any
    task: KernelBenchTask
    settings: KernelBenchSettings
    verdict: Verdict
    plan: TimedPlan

    @classmethod
    def start(
        cls,
        torch: Any,
        task: KernelBenchTask,
        settings: KernelBenchSettings,
        digest: str,
        sandbox: Sandbox,
        plan: TimedPlan | None = None,
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
                "shape_scale": task.scaling.scale,
                "backend": settings.kernel_backend(),
            },
        )
        return cls(torch, task, settings, verdict, plan or TimedPlan())

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
        assert reference.conversation is not None and reference.report is not None
        checked = reference.conversation.schedule.checked
        checked.compare_with(self.comparison)
        for found in checked.findings():
            self.verdict.flag("task", found)
        early = self.run_failure(candidate)
        if early is not None:
            return early
        assert candidate.report is not None
        if self.settings.kernel_backend() == "triton":
            for found in launch_findings(candidate.report):
                self.verdict.flag("backend", found)
        outcomes = []
        for number in range(CHECK_SEEDS):
            seed = checked.verdicts[number]
            problem = seed.check
            if problem is None and number in candidate.report.aliased:
                self.verdict.flag("aliasing", "the output shares memory with an input")
                problem = "the output shares memory with an input (return a new tensor)"
            if problem is None and seed.inputs is not None:
                self.verdict.flag("inputs", seed.inputs[0])
                problem = seed.inputs[1]
            if problem is None and seed.again is not None:
                self.verdict.flag(
                    "nondeterministic",
                    f"seed {number} was right once and wrong when run again",
                )
                problem = f"second run: {seed.again}"
            outcomes.append(
                TestOutcome(
                    index=number,
                    status="passed" if problem is None else "wrong_answer",
                    detail=problem or "",
                )
            )
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
        timed = self._timed_outputs(reference, candidate)
        if timed is not None:
            return self.verdict.failed(
                "wrong_answer", timed, tests_passed=CHECK_SEEDS, tests=outcomes
            )
        return self._timed(reference, candidate, outcomes)

    def run_failure(self, candidate: Ran) -> Feedback | None:
        """The verdict when the candidate's run did not leave complete evidence (None when it
        did). Evidence that is malformed, or a conversation that broke the protocol, is an
        ``evidence`` finding: never a crash, never a task error."""
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

    def _timed_outputs(self, reference: Ran, candidate: Ran) -> str | None:
        """The kept outputs of the timed calls against the reference's (a problem or None);
        most were compared while the window was open (``outputs.TimedOutputs``)."""
        assert reference.conversation is not None and candidate.conversation is not None
        if not candidate.conversation.complete(Phase.PAIRS):
            self.verdict.flag("evidence", "the candidate's timed calls did not all run")
            return "the outputs of the timed calls are missing"
        kept = candidate.conversation.schedule.kept
        kept.compare_with(self.comparison)
        for position, problem in kept.verdicts(self.plan.positions()):
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
        assert reference.report is not None and candidate.report is not None
        assert reference.conversation is not None and candidate.conversation is not None
        ref_times = {
            "eager": reference.conversation.times(Phase.PAIRS),
            "overhead": reference.conversation.times(Phase.IDENTITY),
        }
        if reference.conversation.times(Phase.COMPILE):
            ref_times["compile"] = reference.conversation.times(Phase.COMPILE)
        cand_times = candidate.conversation.times(Phase.PAIRS)
        if len(cand_times) != self.plan.trials or not cand_times:
            self.verdict.flag(
                "evidence",
                f"{len(cand_times)} timings reported for {self.plan.trials} timed calls",
            )
            return self.verdict.failed(
                "runtime_error",
                "the candidate's timings are missing",
                tests_passed=CHECK_SEEDS,
                tests=outcomes,
            )
        overhead = reference.conversation.least_per_call(Phase.IDENTITY) or 0.0
        host_reference = reference.conversation.per_call(Phase.PAIRS)
        host_candidate = candidate.conversation.per_call(Phase.PAIRS)
        timings = {
            "reference": _stats(ref_times["eager"], _net(host_reference, overhead)),
            "candidate": _stats(cand_times, _net(host_candidate, overhead)),
        }
        if "compile" in ref_times:
            timings["compile"] = _stats(ref_times["compile"], None)
        if ref_times.get("overhead"):
            # An identity model timed the same way: the fixed cost of every timed call.
            timings["harness"] = _stats(ref_times["overhead"], None)
        floor = 1e-7
        reference_cost = max(timings["reference"].median_s, floor)
        paired = self._paired(reference, candidate)
        speedup = max(paired.speedup, 1e-12)
        candidate_cost = reference_cost / speedup
        interval = None
        if paired.low is not None and paired.high is not None:
            interval = (paired.low, paired.high)
        excesses = self._host_check(reference, candidate, timings)

        def charged(rate: float, seconds: float) -> float:
            return reference_cost / (reference_cost / max(rate, 1e-12) + max(seconds, 0.0))

        if excesses:
            # Time outside the calls beyond the reference's is the candidate's: per part, by
            # the clock that sees more, the estimate when surely above 0; the interval's low
            # end (what selection uses) always, with the estimate, not the upper bound.
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
                # Likely more work outside the calls than in them, not surely: say why it is low.
                part, clock, excess = likely
                self.verdict.flag(
                    "outside",
                    f"{likely_cost * 1e3:.3f} ms per call outside the timed calls beyond the "
                    f"reference's, more than the {candidate_cost * 1e3:.3f} ms the calls took, "
                    f"but not surely above 0 ({part}, {clock}: {_interval_ms(excess)}): added "
                    "to the low end of the speedup's interval only",
                )
        self._resources(candidate)
        self._huge_pages(reference, candidate)
        light = roofline(reference.report.roofline, candidate_cost)
        measured = speedup
        if light is not None and self.settings.device == "cuda":
            speedup, light = cap_at_light(self.verdict, speedup, reference_cost, light)
        if interval is not None and speedup < measured:
            interval = (min(interval[0], speedup), speedup)  # capped with the reward
        self.verdict.implausible(speedup, "eager")
        vs_compile = None
        if "compile" in timings:
            vs_compile = max(timings["compile"].median_s, floor) / candidate_cost
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
            repeats=len(cand_times),
            speedup_interval=interval,
            timings=timings,
            speedup_vs_compile=vs_compile,
            profiles=profiles,
            profile_seconds=profile_seconds,
            roofline=light,
        )

    def _paired(self, reference: Ran, candidate: Ran) -> PairedEstimate:
        """The speedup from the chunk pairs, by a clock the candidate cannot touch. On a CPU, a
        chunk's cost is the worker's CPU clock between its markers per call
        (``Conversation.cpu_rates``) less the harness's own loop (the least of the reference's
        identity chunks): a clock that runs slow claims less than the work, and the time another
        program holds the CPU is in neither side's CPU clock. On a GPU, the parent's host time
        between the markers per call (the worker waits for the whole device), less the harness's
        own. Claims that give more than ``CLAIM_SHORT`` above it are shown (``clock``); a clock
        that lies is void (``_clock_lie``)."""
        assert reference.conversation is not None and candidate.conversation is not None
        ours_side, theirs_side = candidate.conversation, reference.conversation
        claimed = chunk_pair_speedup(
            theirs_side.chunk_times(Phase.PAIRS), ours_side.chunk_times(Phase.PAIRS)
        )
        if self.settings.device == "cpu":
            ours, theirs = ours_side.cpu_rates(Phase.PAIRS), theirs_side.cpu_rates(Phase.PAIRS)
            identity = theirs_side.outside(Phase.IDENTITY, "cpu") or {}
            loop = max(min(identity.get(Part.BETWEEN, []), default=0.0), 0.0)
            clock = "the worker's CPU clock"
        else:
            ours, theirs = ours_side.host_rates(Phase.PAIRS), theirs_side.host_rates(Phase.PAIRS)
            loop = theirs_side.least_per_call(Phase.IDENTITY) or 0.0
            clock = "the parent's clock"
        if not ours or not theirs:
            # (Clocks that could not be read void the verdict: ``_host_check``.)
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
        """In-process timings must account for the host time the parent saw: the markers
        around each chunk's calls against the claimed median (``_clock_lie``: a clock that lies
        is void), and the span's parts outside the calls (``Part``) against the
        reference's pair by pair (``paired_excess``), each by host time (sees work of any kind)
        and by the worker's CPU time (little of the load's noise). Returns the excesses per call
        by part and clock, which the caller charges (none when the verdict is void; on a CPU not
        the part between the calls, which ``_paired``'s clock holds). An excess surely above the
        work claimed is void (``hidden``). No stamps, no reward."""
        assert reference.conversation is not None and candidate.conversation is not None
        calls = timings["candidate"].trials
        window = timings["candidate"].host_s
        spans = {
            clock: (
                reference.conversation.outside(Phase.PAIRS, key),
                candidate.conversation.outside(Phase.PAIRS, key),
            )
            for clock, key in (("host time", "host"), ("CPU time", "cpu"))
        }
        if window is None or None in spans["host time"]:
            self.verdict.flag("timing", "no host time stamps from the candidate's timed calls")
            return {}
        if None in spans["CPU time"]:
            self.verdict.flag("timing", "the workers' CPU clocks could not be read")
            return {}
        # Like with like: chunk means of the claims (as the speedup counts the work) against
        # the markers, median over the chunks.
        claimed = statistics.median(
            [
                sum(times) / len(times)
                for times in candidate.conversation.chunk_times(Phase.PAIRS)
                if times
            ]
            or [0.0]
        )
        lie = self._clock_lie(reference, candidate, claimed, window, calls)
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
                clock: paired_excess(theirs[part], ours[part], OUTSIDE_BIAS)
                for clock, (theirs, ours) in spans.items()
                if theirs is not None and ours is not None  # (checked above; for mypy)
            }
            for part in Part
        }
        # Surely hidden: per part the larger 95% low end, the parts added.
        lows = {
            part: max((e.low for e in by_clock.values() if e.low), default=0.0)
            for part, by_clock in excesses.items()
        }
        hidden = sum(max(low, 0.0) for low in lows.values())
        if _too_fast(claimed, claimed + hidden, calls, SPAN_SLACK_S / max(self.plan.chunk, 1)):
            said = ", ".join(f"{part} {low * 1e3:.3f} ms" for part, low in lows.items() if low > 0)
            # Statistical: the evaluator confirms it with fresh workers (``rounds.CONFIRMED``).
            self.verdict.flag(
                "hidden",
                "work outside the timed calls: the candidate spent surely at least "
                f"{hidden * 1e3:.3f} ms per call more than the reference ({said}; the 95% "
                f"intervals' low ends), beside the {claimed * 1e3:.3f} ms it claimed",
            )
        if self.settings.device == "cpu":
            del excesses[between]
        return excesses

    def _clock_lie(
        self, reference: Ran, candidate: Ran, claimed: float, window: float, calls: int
    ) -> str | None:
        """The clock that the claimed seconds per call disagree with (``_too_fast``), in
        words; None when they agree. On a CPU, the worker's CPU clock between the markers, net
        of the harness's own (host stamps of a loaded parent run late; that clock stands still
        outside the calls). On a GPU, host time (kernels run on no CPU clock)."""
        assert reference.conversation is not None and candidate.conversation is not None
        if self.settings.device == "cpu":
            theirs = reference.conversation.cpu_rates(Phase.IDENTITY)
            ours = candidate.conversation.cpu_rates(Phase.PAIRS)
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

    def _resources(self, candidate: Ran) -> None:
        report, result = candidate.report, candidate.sandbox
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
        conversation = candidate.conversation
        # On CUDA the driver's threads run beside the calls: these two are for the CPU.
        if conversation is not None and self.settings.device == "cpu":
            chunks = len(conversation.chunk_times(Phase.PAIRS))
            # Exact: a worker on one CPU cannot spend more CPU time than host time.
            cpu, host = conversation.span_cpu(Phase.PAIRS) or (0.0, 0.0)
            if cpu > host + SPAN_CPU_SLACK_S * max(chunks, 1):
                self.verdict.flag(
                    "parallel",
                    f"the candidate's process spent {cpu * 1e3:.1f} ms of CPU time in "
                    f"{host * 1e3:.1f} ms of timed chunks (seeds to outputs): it ran on more "
                    "than its one CPU",
                )
            # While it waits, the reference's chunk runs on the same CPU: a thread of the
            # candidate's running then slows the reference's calls.
            waiting = conversation.waiting_cpu(Phase.PAIRS)
            if waiting is not None and waiting > WAITING_CPU_SLACK_S * (chunks + 1):
                self.verdict.flag(
                    "parallel",
                    f"the candidate's process spent {waiting * 1e3:.1f} ms of CPU time while "
                    "it waited for its turns (the reference's calls ran then, on the same "
                    "CPU)",
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

    def _huge_pages(self, reference: Ran, candidate: Ran) -> None:
        """The workers run without transparent huge pages (worker ``layout.no_huge_pages``): a
        candidate that turned them back on, or hid what it holds, ran on memory the reference
        was not given."""
        theirs = reference.conversation.huge_pages if reference.conversation else None
        ours = candidate.conversation.huge_pages if candidate.conversation else None
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

    @property
    def comparison(self) -> Comparison:
        """Outputs against expected ones, at the task's tolerance."""
        return Comparison(self.torch, self.settings.tolerance)


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
