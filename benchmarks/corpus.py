"""A corpus of published KernelBench kernels through ``maxcode eval``, beside the speedups their
authors measured: what does the harness make of code nobody here wrote?

The corpus is a JSON-lines file, one KernelBench problem a line, as CUDA-L1 publishes theirs
(``level_id``, ``task_id``, ``ref_code``: the problem, with ``Model``, ``get_inputs`` and
``get_init_inputs``; ``custom_code``: their ``ModelNew``, empty for some; ``score_default``:
their speedup over eager PyTorch, null for some). Its files stay outside this repository; the
default is ``../shared/corpora/cuda-l1/h100.jsonl`` beside the repository's root.

For each chosen problem it writes the two sources to a temporary folder and runs
``maxcode eval problem.py candidate.py --json`` as a user would, and prints per problem:
compiled, correct, our speedup with its 95% interval, their score, the harness's findings
(``flags``) and, where no measurement stands, why (the void: a timeout, a reference that does
not run, an evaluation that gave no result, an integrity finding that took the speedup). Then a
summary: how many ran, compiled, were correct and void (each void with its reason), and the
Spearman rank correlation of our speedups with their scores over the correct problems that
have both, with the median of each.

    python benchmarks/corpus.py [CORPUS.jsonl] [--device cpu|cuda] [--scale 0.1] [--rounds 1]
        [--levels 1,2] [--only level1/19,level2/3] [--limit N] [--sample N --seed S]
        [--timeout 900] [--jsonl rows.jsonl] [--workers 1] [--compile-baseline]

On a CPU (``--device cpu``, the default) only candidates that need no CUDA are run: those whose
source (and the problem's) shows none of ``cuda_markers``'s signs; how many were skipped for
it, and how many had no custom code, is in the summary. ``--device cuda`` runs every one with
custom code. ``--limit`` (the first N) and ``--sample`` (N drawn with ``--seed``) choose among
the problems that would run, after ``--levels`` and ``--only``. ``--scale`` and ``--rounds`` go
to ``maxcode eval`` (unset: eval's own: full sizes, and the rounds a reported speedup takes);
the reference's ``torch.compile`` is not timed unless ``--compile-baseline`` (their
``score_default`` is against eager PyTorch).

A CPU's speedups and an H100's are different measurements: the correlation says whether the
two rank the kernels alike, not that either is wrong. Timings need an otherwise idle machine;
``--workers`` above 1 runs evaluations side by side (quicker, noisier).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tokenize
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpora" / "cuda-l1" / "h100.jsonl"
ROW_SCHEMA = 1
"""The version of the rows ``--jsonl`` writes (``schema_version`` in each)."""
BAD_INPUT_EXIT = 2
"""``maxcode eval``'s exit status for input it cannot judge (e.g. a reference that fails)."""
REASON_CHARS = 500
"""A reason (an error, a void) is kept to its first line, and to this many characters."""
KILL_GRACE_S = 5.0
"""After a timeout, how long ``maxcode eval`` has to stop its workers before it is killed."""

CUDA_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.MULTILINE))
    for name, pattern in (
        (
            "CUDA sources",
            r"\bcuda_sources\b|\bextra_cuda_cflags\b|\bwith_cuda\s*=\s*True\b|\bCUDAExtension\b",
        ),
        (".cu file", r"\.cuh?['\"]"),
        ("CUDA kernel", r"__global__|__device__|<<<"),
        ("triton", r"^\s*(?:import|from)\s+triton\b|\btriton\.(?:jit|language)\b"),
        ("cupy", r"^\s*(?:import|from)\s+cupy\b"),
        ("numba.cuda", r"\bnumba\.cuda\b|^\s*from\s+numba\s+import\s+[^\n]*\bcuda\b"),
        ("pycuda", r"\bpycuda\b"),
        ("CUDA graph", r"\bCUDAGraph\b|\bcuda\.graph\b|\bmake_graphed_callables\b"),
        ("CUDA stream", r"\bcuda\.(?:Stream|stream|current_stream|default_stream)\b"),
        ("torch.cuda", r"\btorch\.cuda\b|^\s*from\s+torch\s+import\s+[^\n]*\bcuda\b"),
        (".cuda()", r"\.cuda\s*\("),
        ('"cuda" device', r"['\"]cuda(?::\d+)?['\"]"),
    )
)
"""Signs in a source that it needs CUDA, most specific first. ``torch.backends.cudnn`` settings
and ``.is_cuda`` tests are not among them: they run on a CPU."""


def without_comments(source: str) -> str:
    """``source`` with its comments blanked (a comment naming ``torch.cuda`` needs no GPU);
    strings stay: kernel sources and device names live in them. Untokenizable source is
    returned as it is."""
    lines = source.splitlines(keepends=True)
    try:
        comments = [
            token.start
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError):
        return source
    for row, column in comments:
        line = lines[row - 1]
        ending = line[len(line.rstrip("\r\n")) :]
        lines[row - 1] = line[:column] + ending
    return "".join(lines)


def cuda_markers(source: str) -> list[str]:
    """The names of the ``CUDA_MARKERS`` found in ``source``, most specific first; empty when
    it needs no CUDA."""
    code = without_comments(source)
    return [name for name, pattern in CUDA_MARKERS if pattern.search(code)]


def average_ranks(values: list[float]) -> list[float]:
    """The rank of each value (1 for the smallest), tied values sharing their average rank."""
    order = sorted(range(len(values)), key=lambda index: values[index])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation: the Pearson correlation of the average ranks; None with
    fewer than two pairs or when either side has a single rank."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} values against {len(ys)}")
    if len(xs) < 2:
        return None
    rx, ry = average_ranks(xs), average_ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    covariance = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    spread = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return covariance / spread if spread else None


@dataclass
class Problem:
    """One line of the corpus."""

    name: str
    """``level<L>/<task_id>``."""
    level: int
    task_id: int
    ref_code: str
    custom_code: str
    score: float | None
    """Their ``score_default``: the speedup over eager PyTorch they measured."""


@dataclass
class Row:
    """One problem's evaluation (or why it was not evaluated)."""

    problem: str
    """``level<L>/<task_id>``."""
    score: float | None = None
    """Their ``score_default``."""
    skipped: str = ""
    """Why it was not run: no custom code, or the CUDA it needs (its markers) on a CPU."""
    ran: bool = False
    """``maxcode eval`` gave a result."""
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None
    """Ours, as ``maxcode eval`` reports it (0 when a void finding took it)."""
    interval: tuple[float, float] | None = None
    """Our speedup's 95% interval."""
    claimed: float | None = None
    """The speedup measured before an integrity finding voided it."""
    flags: list[str] = field(default_factory=list)
    """The harness's findings (``category: message``), void and warning alike."""
    error: str = ""
    """Why it did not compile or was not correct (``kind: message``, one line)."""
    void: str = ""
    """Why no measurement stands: a timeout, bad input (exit 2), an evaluation with no result,
    or the integrity finding that took the speedup."""
    seconds: float = 0.0
    """Wall time of the whole ``maxcode eval``."""
    phases: dict[str, float] = field(default_factory=dict)
    """Where the evaluation's seconds went (``phases`` of ``maxcode eval --json``: start-up,
    build, checks, timing, ...)."""
    schema_version: int = ROW_SCHEMA


def read_corpus(path: Path) -> list[Problem]:
    if not path.is_file():
        raise SystemExit(f"{path}: no such corpus file")
    problems = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                level, task_id = int(entry["level_id"]), int(entry["task_id"])
                score = entry.get("score_default")
                problems.append(
                    Problem(
                        name=f"level{level}/{task_id}",
                        level=level,
                        task_id=task_id,
                        ref_code=str(entry["ref_code"]),
                        custom_code=str(entry.get("custom_code") or ""),
                        score=float(score) if isinstance(score, (int, float)) else None,
                    )
                )
            except (ValueError, KeyError, TypeError) as problem:
                raise SystemExit(f"{path}:{number}: not a corpus row ({problem})") from None
    return problems


def why_skipped(problem: Problem, device: str) -> str:
    """Why ``problem`` is not run on ``device``; empty when it is."""
    if not problem.custom_code.strip():
        return "no custom code"
    if problem.custom_code.strip() == "None":
        # CUDA-L1 has 17 such rows (a score beside some): a missing kernel written as text.
        return 'no custom code (the text "None")'
    if device == "cuda":
        return ""
    markers = cuda_markers(problem.custom_code) + cuda_markers(problem.ref_code)
    return "needs CUDA: " + ", ".join(dict.fromkeys(markers)) if markers else ""


def run_bounded(command: list[str], timeout_s: float) -> tuple[int | None, str, str]:
    """Run ``command`` in its own process group: (exit status or None on a timeout, stdout,
    stderr). On a timeout the group gets SIGTERM (``maxcode eval`` stops its workers), then
    SIGKILL after ``KILL_GRACE_S``."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        stdout = stderr = ""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                stdout, stderr = process.communicate(timeout=KILL_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            # A process outside the group holds the pipes open: leave it their other ends.
            process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        return None, stdout or "", stderr or ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:REASON_CHARS] if lines else "no output"


def evaluate(
    problem: Problem,
    device: str,
    scale: float | None,
    rounds: int | None,
    timeout_s: float,
    compile_baseline: bool,
) -> Row:
    row = Row(problem.name, score=problem.score)
    with tempfile.TemporaryDirectory(prefix="maxcode-corpus-") as folder:
        reference = Path(folder) / "problem.py"
        candidate = Path(folder) / "candidate.py"
        reference.write_text(problem.ref_code, encoding="utf-8")
        candidate.write_text(problem.custom_code, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "maxcode",
            "eval",
            str(reference),
            str(candidate),
            "--json",
            "--device",
            device,
            *(["--scale", str(scale)] if scale else []),
            *(["--rounds", str(rounds)] if rounds else []),
            "--compile-baseline" if compile_baseline else "--no-compile-baseline",
        ]
        started = time.perf_counter()
        status, stdout, stderr = run_bounded(command, timeout_s)
        row.seconds = time.perf_counter() - started
    # The reason names the file, not the temporary folder it was in.
    stderr = stderr.replace(f"{folder}{os.sep}", "")
    if status is None:
        row.void = f"timeout: over {timeout_s:g} s"
        return row
    if status == BAD_INPUT_EXIT:
        row.void = f"bad input: {last_line(stderr).removeprefix('error: ')}"
        return row
    try:
        result = json.loads(stdout) if status == 0 else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        row.void = f"no result (exit {status}): {last_line(stderr)}"
        return row
    error = result.get("error") or {}
    interval = result.get("speedup_interval")
    speedup = result.get("speedup")
    row.ran = True
    row.compiled = bool(result.get("compiled"))
    row.correct = bool(result.get("correct"))
    row.speedup = float(speedup) if speedup is not None else None
    row.interval = (float(interval[0]), float(interval[1])) if interval else None
    row.claimed = result.get("claimed_speedup")
    row.flags = [str(flag) for flag in result.get("flags") or []]
    row.phases = {str(k): float(v) for k, v in (result.get("phases") or {}).items()}
    if error:
        message = str(error.get("message", "")).strip().splitlines()
        first = message[0] if message else ""
        row.error = f"{error.get('kind', 'error')}: {first}"[:REASON_CHARS]
    if result.get("suspect"):
        row.void = f"integrity: {result['suspect']}"
    return row


def yes_no(value: bool) -> str:
    return "yes" if value else "no"


def number(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


HEADER = (
    f"{'problem':<12} {'compiled':>8} {'correct':>7} {'speedup':>8} {'95% interval':>13} "
    f"{'theirs':>7} {'eval s':>6}"
)


def print_row(row: Row) -> None:
    interval = f"{row.interval[0]:.2f}-{row.interval[1]:.2f}" if row.interval else ""
    tail = ""
    if row.error:
        tail += f"  {row.error}"
    if row.flags:
        tail += "  flags: " + "; ".join(flag[:120] for flag in row.flags)
    if row.void:
        claimed = f" (claimed {row.claimed:.3f})" if row.claimed else ""
        tail += f"  void{claimed}: {row.void}"
    compiled = yes_no(row.compiled) if row.ran else "-"
    correct = yes_no(row.correct) if row.ran else "-"
    print(
        f"{row.problem:<12} {compiled:>8} {correct:>7} {number(row.speedup):>8} "
        f"{interval:>13} {number(row.score):>7} {row.seconds:6.1f}{tail}",
        flush=True,
    )


def summary(
    rows: list[Row], would_run: int, device: str, scale: float | None, rounds: int | None
) -> None:
    """``rows``: the evaluated and the skipped; ``would_run``: how many were not skipped,
    before ``--sample`` and ``--limit``."""
    no_code = [row for row in rows if row.skipped.startswith("no custom code")]
    needs_cuda = [row for row in rows if row.skipped.startswith("needs CUDA")]
    evaluated = [row for row in rows if not row.skipped]
    ran = [row for row in evaluated if row.ran]
    compiled = [row for row in ran if row.compiled]
    correct = [row for row in ran if row.correct]
    voids = [row for row in evaluated if row.void]
    none_count = sum(1 for row in no_code if "None" in row.skipped)
    as_none = f' ({none_count} of them the text "None")' if none_count else ""
    settings = f"on {device}, scale {scale or 'full'}, rounds {rounds or 'eval default'}"
    print()
    print(
        f"{len(no_code) + len(needs_cuda) + would_run} problems chosen: "
        f"{len(no_code)} with no custom code{as_none}, "
        f"{len(needs_cuda)} skipped as needing CUDA, "
        f"{would_run} to run"
    )
    if needs_cuda:
        first_markers = Counter(row.skipped.split(": ", 1)[1].split(", ")[0] for row in needs_cuda)
        by_marker = ", ".join(f"{name} {count}" for name, count in first_markers.most_common())
        print(f"needing CUDA, by first sign: {by_marker}")
    print(
        f"evaluated {len(evaluated)} {settings}: {len(ran)} ran, {len(compiled)} compiled, "
        f"{len(correct)} correct, {len(voids)} void"
    )
    for row in voids:
        claimed = f" (claimed {row.claimed:.3f})" if row.claimed else ""
        print(f"  void: {row.problem}{claimed}: {row.void}")
    for row in ran:
        if not row.compiled:
            print(f"  not compiled: {row.problem}: {row.error}")
        elif not row.correct:
            print(f"  not correct: {row.problem}: {row.error}")
    paired = [
        row for row in correct if not row.void and row.speedup is not None and row.score is not None
    ]
    ours = [row.speedup or 0.0 for row in paired]
    theirs = [row.score or 0.0 for row in paired]
    rho = spearman(ours, theirs)
    print(
        f"correct and not void, with their score: {len(paired)}; Spearman rank correlation "
        f"of our speedup with their score_default: {'-' if rho is None else f'{rho:.3f}'}"
    )
    if paired:
        print(
            f"median speedup: ours {statistics.median(ours):.3f}, "
            f"theirs {statistics.median(theirs):.3f}"
        )
    if evaluated:
        seconds = [row.seconds for row in evaluated]
        print(
            f"evaluation wall time: median {statistics.median(seconds):.1f} s, "
            f"max {max(seconds):.1f} s, total {sum(seconds):.0f} s"
        )


def chosen_problems(
    problems: list[Problem], levels: set[int] | None, only: set[str]
) -> list[Problem]:
    names = {problem.name for problem in problems}
    if only - names:
        absent = ", ".join(sorted(only - names))
        raise SystemExit(f"--only: no such problem in the corpus: {absent}")
    return [
        problem
        for problem in problems
        if (levels is None or problem.level in levels) and (not only or problem.name in only)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "corpus",
        type=Path,
        nargs="?",
        default=DEFAULT_CORPUS if DEFAULT_CORPUS.is_file() else None,
        help=f"the corpus, JSON lines (default {DEFAULT_CORPUS} where it exists)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--scale", type=float, default=None, help="maxcode eval --scale")
    parser.add_argument("--rounds", type=int, default=None, help="maxcode eval --rounds")
    parser.add_argument("--levels", default="", help="comma-separated levels (default: all)")
    parser.add_argument("--only", default="", help="e.g. level1/19,level2/3")
    parser.add_argument("--limit", type=int, default=None, help="the first N that would run")
    parser.add_argument("--sample", type=int, default=None, help="N drawn from those that would")
    parser.add_argument("--seed", type=int, default=0, help="the seed of --sample")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per evaluation")
    parser.add_argument("--jsonl", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--workers", type=int, default=1, help="evaluations run side by side")
    parser.add_argument(
        "--compile-baseline", action="store_true", help="also time torch.compile of the reference"
    )
    options = parser.parse_args()
    if options.corpus is None:
        parser.error(f"give the corpus (no {DEFAULT_CORPUS})")
    try:
        levels = {int(level) for level in options.levels.split(",") if level.strip()} or None
    except ValueError:
        parser.error(f"--levels: comma-separated numbers, not {options.levels!r}")
    only = {item.strip() for item in options.only.split(",") if item.strip()}
    problems = chosen_problems(read_corpus(options.corpus), levels, only)
    rows = {problem.name: Row(problem.name, score=problem.score) for problem in problems}
    for problem in problems:
        rows[problem.name].skipped = why_skipped(problem, options.device)
    runnable = [problem for problem in problems if not rows[problem.name].skipped]
    would_run = len(runnable)
    if options.sample is not None:
        drawn = random.Random(options.seed).sample(runnable, min(options.sample, len(runnable)))
        names = {problem.name for problem in drawn}
        runnable = [problem for problem in runnable if problem.name in names]
    if options.limit is not None:
        runnable = runnable[: options.limit]
    chosen = {problem.name for problem in runnable}
    # The rows: those evaluated and those skipped (with why); what --sample or --limit left
    # out is only counted.
    kept = [
        rows[problem.name]
        for problem in problems
        if problem.name in chosen or rows[problem.name].skipped
    ]
    print(HEADER)
    with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
        futures = {
            problem.name: pool.submit(
                evaluate,
                problem,
                options.device,
                options.scale,
                options.rounds,
                options.timeout,
                options.compile_baseline,
            )
            for problem in runnable
        }
        # Each row is written as it comes: a run stopped early keeps the rows it ran.
        jsonl = options.jsonl.open("w", encoding="utf-8") if options.jsonl else None
        with jsonl or contextlib.nullcontext():
            for index, row in enumerate(kept):
                if row.problem in futures:
                    row = kept[index] = futures[row.problem].result()
                    print_row(row)
                if jsonl is not None:
                    jsonl.write(json.dumps(asdict(row)) + "\n")
                    jsonl.flush()
    summary(kept, would_run, options.device, options.scale, options.rounds)


if __name__ == "__main__":
    main()
