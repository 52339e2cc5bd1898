"""A run killed with SIGKILL and resumed ends with exactly the work of an unbroken run."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers import write_task
from tests.llm.fake_llm_server import FakeLLMServer, Step

SLOW_SUM = """#include <cstdio>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    volatile long long work = 0;
    for (long long i = 0; i < LOOPS; i++) work += i;
    printf("%lld\\n", a + b);
}
"""
# Many variants, so that the prompt-hash choice below rarely proposes a program twice.
VARIANTS = [SLOW_SUM.replace("LOOPS", str(300000 - 7000 * index)) for index in range(40)]


def responder(body: dict[str, Any]) -> Step:
    prompt = body["messages"][-1]["content"]
    if any("You review one attempt" in m["content"] for m in body["messages"]):
        return Step(texts=["Diagnosis: the loop does needless work.\nSuggestions:\n- Remove it."])
    pick = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    texts = [f"```cpp\n{VARIANTS[(pick + i) % len(VARIANTS)]}```" for i in range(int(body["n"]))]
    return Step(texts=texts)


# A terminal's maxcode starts with SIGINT at Python's default handler. A process started from
# a long test session may inherit SIGINT ignored or blocked (both survive exec); undo that.
_AS_FROM_A_TERMINAL = (
    "import signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
)


def _command(task: Path, store: Path, url: str) -> list[str]:
    """Three steps of two candidates: both tests stop the run in its first step or just
    after it, so the resumed run has at least two steps of its own to do."""
    return [
        sys.executable, "-c", _AS_FROM_A_TERMINAL + "from maxcode.cli import run_cli; run_cli()",
        "optimize", str(task),
        "--model", "openai/gpt-4o-mini", "--base-url", url, "--method", "cuda-llm",
        "--maxcode", "--depth", "3", "--candidates", "2", "--metric", "instructions",
        "--store", str(store), "--json",
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": "sk-test"}


def _evaluations(store: Path) -> list[tuple[str, float]]:
    with sqlite3.connect(store) as db:
        return sorted(db.execute("SELECT eval_key, reward FROM evaluations").fetchall())


def _calls(store: Path) -> list[str]:
    with sqlite3.connect(store) as db:
        return sorted(row[0] for row in db.execute("SELECT purpose FROM llm_calls WHERE ok = 1"))


def _signal_status(pid: int | str = "self") -> str:
    """The ignored and blocked signal masks of a process (for a failure's message)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return " ".join(x.strip() for x in status if x.startswith(("SigIgn", "SigBlk")))
    except OSError:
        return "?"


def _children(pid: int) -> list[str]:
    """The ids of ``pid``'s child processes (an evaluation's compiler or sandbox)."""
    found: list[str] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += (task / "children").read_text().split()
        except OSError:
            pass
    return found


def _count(store: Path) -> int:
    if not store.exists():
        return 0  # connecting would create it, racing maxcode's own creation of the store
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as db:
            return int(db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_sigkilled_run_resumes_to_the_same_end_without_repeating_work(tmp_path: Path) -> None:
    task = write_task(
        tmp_path / "task",
        reference=VARIANTS[0],
        tests=[("1 2\n", "3\n"), ("40 2\n", "42\n"), ("-5 5\n", "0\n")],
    )
    unbroken, broken = FakeLLMServer(), FakeLLMServer()
    unbroken.responder = broken.responder = responder
    try:
        whole = subprocess.run(
            _command(task, tmp_path / "a.db", unbroken.url),
            capture_output=True, text=True, timeout=600, env=_env(), check=False,
        )  # fmt: skip
        assert whole.returncode == 0, whole.stderr
        expected = json.loads(whole.stdout)
        assert expected["evaluations"] >= 4

        store = tmp_path / "b.db"
        victim = subprocess.Popen(
            _command(task, store, broken.url),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while _count(store) < 2 and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert victim.poll() is None, "the run ended before it could be killed"
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        killed_at = _count(store)
        assert 2 <= killed_at < expected["evaluations"]
        with sqlite3.connect(store) as db:
            (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
        resumed = subprocess.run(
            [
                sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "optimize",
                "--resume", run_id, "--store", str(store), "--base-url", broken.url, "--json",
            ],
            capture_output=True, text=True, timeout=600, env=_env(), check=False,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        result = json.loads(resumed.stdout)
    finally:
        unbroken.close()
        broken.close()

    assert _evaluations(store) == _evaluations(tmp_path / "a.db")
    assert result["evaluations"] == expected["evaluations"]
    assert result["best_speedup"] == expected["best_speedup"]
    assert result["trace"] == expected["trace"]
    # Every completed LLM call happened once; at most the one in flight at the kill was redone.
    assert _calls(store) == _calls(tmp_path / "a.db")
    assert len(broken.seen) - len(unbroken.seen) in (0, 1, 2)
    assert result["status"] == "done"


def test_ctrl_c_stops_cleanly_keeps_everything_and_resumes(tmp_path: Path) -> None:
    task = write_task(
        tmp_path / "task", reference=VARIANTS[0], tests=[("1 2\n", "3\n"), ("40 2\n", "42\n")]
    )
    server = FakeLLMServer()
    server.responder = responder
    store = tmp_path / "c.db"
    try:
        running = subprocess.Popen(
            _command(task, store, server.url),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )  # fmt: skip
        # Interrupt once the first step's line is out (its evaluations are stored by then).
        assert running.stderr is not None
        before = []
        for line in running.stderr:
            before.append(line)
            if line.lstrip().startswith("step 1/"):
                break
        status = _signal_status(running.pid)
        running.send_signal(signal.SIGINT)
        _, stderr = running.communicate(timeout=120)
        stderr = "".join(before) + stderr
        assert running.returncode == 130, f"{stderr}\nchild {status}; test {_signal_status()}"
        assert "interrupted; everything so far is kept" in stderr
        assert "Traceback" not in stderr
        with sqlite3.connect(store) as db:
            run_id, status = db.execute("SELECT run_id, status FROM runs").fetchone()
        assert status == "stopped"
        kept = _count(store)
        assert kept >= 1
        resumed = subprocess.run(
            [
                sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "optimize",
                "--resume", run_id, "--store", str(store), "--base-url", server.url, "--json",
            ],
            capture_output=True, text=True, timeout=600, env=_env(), check=False,
        )  # fmt: skip
    finally:
        server.close()
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "done"
    assert result["evaluations"] >= kept


def test_a_first_ctrl_c_keeps_the_evaluations_in_flight_and_asks_nothing_more(
    tmp_path: Path,
) -> None:
    """Ctrl-C while the first step's candidates are evaluated: it says at once what it waits
    for, both evaluations end and are recorded (a resume measures neither again), and no
    further model call is made (the critic's included)."""
    task = write_task(
        tmp_path / "task", reference=VARIANTS[0], tests=[("1 2\n", "3\n"), ("40 2\n", "42\n")]
    )
    server = FakeLLMServer()
    server.responder = responder
    store = tmp_path / "c.db"
    try:
        running = subprocess.Popen(
            _command(task, store, server.url),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while not server.seen and running.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        # The answer read and its two programs handed to the evaluators: they compile.
        while not _children(running.pid) and running.poll() is None:
            time.sleep(0.01)
        time.sleep(0.2)
        assert running.poll() is None and _count(store) == 0, "evaluated before the Ctrl-C"
        running.send_signal(signal.SIGINT)
        _, stderr = running.communicate(timeout=300)
    finally:
        server.close()
    assert running.returncode == 130, stderr
    assert "Ctrl-C: stopping once the 2 evaluations in flight end" in stderr, stderr
    assert "Traceback" not in stderr
    assert _count(store) == 2
    assert len(server.seen) == 1  # the first proposal; no critique, no second step
    with sqlite3.connect(store) as db:
        (status,) = db.execute("SELECT status FROM runs").fetchone()
    assert status == "stopped"
