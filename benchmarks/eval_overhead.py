"""How much time ``maxcode eval`` adds over doing the same work by hand.

For every bundled C++ task with a known fast rewrite, two ways of doing the same work are
timed side by side, alternating, in one run:

- ``shell``: a bash loop that compiles the reference and the rewrite with the task's flags
  (both at once, as maxcode does), then runs both on every test ``repeats + 1`` times (one
  correctness round, ``repeats`` timed rounds), comparing each output with ``cmp``; no
  sandbox, no timing code;
- ``maxcode eval``: ``maxcode eval TASK fast.cpp --metric wall --repeats R --json`` as a user
  runs it, with an empty build cache (both programs compiled, like the shell loop); this
  includes starting Python and importing maxcode;
- ``per candidate``: ``evaluate_task`` called in this process, empty build cache, which is
  what a search pays for each candidate (the interpreter is already running).

maxcode's side includes everything its sandbox does per run (since harness integrity round 2:
new user, ipc and mount namespaces and a fresh private folder for every run, the whole
tree's CPU time measured), so this is the cost of that isolation against a bare compile and
run; the goal is at most +10% per candidate. Overhead = maxcode / shell - 1, per task and
summed over tasks. Run:

    python benchmarks/eval_overhead.py [--repeats 5] [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "cpp"
FIXTURES = REPO / "tests" / "fixtures" / "cpp"

SHELL_LOOP = r"""
set -e
work=$(mktemp -d)
g++ $FLAGS -o "$work/ref" "$TASK/reference.cpp" &
g++ $FLAGS -o "$work/cand" "$CANDIDATE" &
wait
for round in $(seq 0 "$REPEATS"); do
  for input in "$TASK"/tests/input.*.txt; do
    expected="${input/input./output.}"
    "$work/ref" < "$input" > "$work/out"; cmp -s "$work/out" "$expected" || echo "ref differs"
    "$work/cand" < "$input" > "$work/out"; cmp -s "$work/out" "$expected" || echo "cand differs"
  done
done
rm -rf "$work"
"""


def task_flags(task: Path) -> str:
    sys.path.insert(0, str(REPO / "src"))
    from maxcode.kinds.load import load_task

    return " ".join(load_task(str(task)).compile_flags)


def time_shell(task: Path, candidate: Path, repeats: int) -> float:
    env = {
        **os.environ,
        "TASK": str(task),
        "CANDIDATE": str(candidate),
        "REPEATS": str(repeats),
        "FLAGS": task_flags(task),
    }
    started = time.perf_counter()
    done = subprocess.run(["bash", "-c", SHELL_LOOP], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or "differs" in done.stdout:
        raise SystemExit(f"shell loop failed on {task.name}: {done.stdout} {done.stderr}")
    return elapsed


def clear_builds(home: Path) -> None:
    """Empty the build cache but keep the sandbox init (built once per machine)."""
    builds = home / "cache" / "build"
    if builds.is_dir():
        for entry in builds.iterdir():
            if not entry.name.startswith("init-"):
                shutil.rmtree(entry)
    shutil.rmtree(home / "cache" / "instructions", ignore_errors=True)


def time_maxcode(task: Path, candidate: Path, repeats: int, home: Path) -> float:
    clear_builds(home)
    env = {**os.environ, "MAXCODE_HOME": str(home)}
    command = ["maxcode", "eval", str(task), str(candidate), "--json", "--repeats", str(repeats)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or '"correct": true' not in done.stdout:
        raise SystemExit(f"maxcode eval failed on {task.name}: {done.stderr or done.stdout[:500]}")
    return elapsed


def time_in_process(task: Path, candidate: Path, repeats: int, home: Path) -> float:
    from maxcode.kinds import evaluate_task
    from maxcode.kinds.load import load_task

    clear_builds(home)
    os.environ["MAXCODE_HOME"] = str(home)
    started = time.perf_counter()
    feedback = evaluate_task(load_task(str(task)), candidate.read_text(), repeats=repeats)
    elapsed = time.perf_counter() - started
    if not feedback.correct:
        raise SystemExit(f"evaluate_task failed on {task.name}: {feedback.error}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per evaluation")
    parser.add_argument("--trials", type=int, default=3, help="measurements per side and task")
    args = parser.parse_args()

    tasks = sorted(
        path for path in EXAMPLES.iterdir() if (FIXTURES / path.name / "fast.cpp").is_file()
    )
    with tempfile.TemporaryDirectory(prefix="maxcode-bench-home-") as home_name:
        home = Path(home_name)
        # Warm-up: builds the sandbox init once, as any first use on a machine does.
        time_maxcode(tasks[0], FIXTURES / tasks[0].name / "fast.cpp", 1, home)
        time_in_process(tasks[0], FIXTURES / tasks[0].name / "fast.cpp", 1, home)
        header = f"{'task':<24} {'shell s':>8} {'eval s':>8} {'overhead':>9}"
        print(f"{header} {'per cand. s':>12} {'overhead':>9}")
        totals = {"shell": 0.0, "cli": 0.0, "inner": 0.0}
        for task in tasks:
            candidate = FIXTURES / task.name / "fast.cpp"
            samples: dict[str, list[float]] = {"shell": [], "cli": [], "inner": []}
            for _ in range(args.trials):
                samples["shell"].append(time_shell(task, candidate, args.repeats))
                samples["cli"].append(time_maxcode(task, candidate, args.repeats, home))
                samples["inner"].append(time_in_process(task, candidate, args.repeats, home))
            medians = {side: statistics.median(values) for side, values in samples.items()}
            for side, value in medians.items():
                totals[side] += value
            print(_row(task.name, medians))
        print(_row("total", totals))


def _row(name: str, seconds: dict[str, float]) -> str:
    shell, cli, inner = seconds["shell"], seconds["cli"], seconds["inner"]
    return (
        f"{name:<24} {shell:>8.3f} {cli:>8.3f} {cli / shell - 1:>+9.1%} "
        f"{inner:>12.3f} {inner / shell - 1:>+9.1%}"
    )


if __name__ == "__main__":
    main()
