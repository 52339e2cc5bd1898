"""``maxcode eval`` on C++ tasks: verdicts, metrics, hostile candidates, the build cache."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from maxcode.harness.build import build_cpp
from maxcode.harness.sandbox import Sandbox
from maxcode.kinds.cpp.evaluate_cpp import evaluate_cpp
from maxcode.kinds.load import load_task
from tests.helpers import ECHO_SUM, eval_json, processes_of_this_test, run_maxcode, write_task

KEYS = {
    "compiled", "correct", "speedup", "metric", "reference_cost", "candidate_cost",
    "tests_passed", "tests_total", "error", "flags",
}  # fmt: skip


def _candidate(tmp_path: Path, source: str, name: str = "candidate.cpp") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def test_correct_candidate_json_has_the_contract_keys(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t")
    result = eval_json(str(task), str(_candidate(tmp_path, ECHO_SUM)), "--repeats", "2")
    assert set(result) >= KEYS
    assert result["compiled"] and result["correct"]
    assert result["tests_passed"] == result["tests_total"] == 2
    assert result["error"] is None
    assert result["speedup"] > 0 and result["metric"] == "wall"
    assert result["isolation"] in ("bwrap", "unshare", "rlimits")


def test_compile_error_exits_0_with_bounded_diagnostics(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t")
    broken = "#include <cstdio>\nint main() {\n  int x = ;\n  return 0;\n}\n"
    result = eval_json(str(task), str(_candidate(tmp_path, broken)))
    assert result["compiled"] is False and result["correct"] is False
    assert result["speedup"] == 0
    assert result["error"]["kind"] == "compile_error"
    assert "candidate.cpp:3:" in result["error"]["message"]
    assert len(result["compile_output"]) < 5000


def test_wrong_answer_names_the_test_and_the_difference(tmp_path: Path) -> None:
    task = write_task(
        tmp_path / "t", tests=[("1 2\n", "3\n"), ("40 2\n", "42\n"), ("0 0\n", "0\n")]
    )
    wrong = ECHO_SUM.replace("a + b", "a + b + (a == 40)")
    result = eval_json(str(task), str(_candidate(tmp_path, wrong)))
    assert result["compiled"] and not result["correct"]
    assert result["tests_passed"] == 2
    assert result["error"] == {
        "kind": "wrong_answer",
        "message": "test 1: line 1: expected '42', got '43'",
    }
    assert [test["status"] for test in result["tests"]] == ["passed", "wrong_answer", "passed"]


def test_crash_is_a_runtime_error_with_the_signal(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t")
    crash = "#include <cstdlib>\nint main() { volatile int* p = nullptr; return *p; }\n"
    result = eval_json(str(task), str(_candidate(tmp_path, crash)))
    assert result["error"]["kind"] == "runtime_error"
    assert "SIGSEGV" in result["error"]["message"]


def test_endless_loop_times_out_within_the_limit(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t", toml='kind = "cpp"\ntimeout_s = 1\n')
    loop = "int main() { volatile unsigned long x = 0; for (;;) x++; }\n"
    started = time.monotonic()
    result = eval_json(str(task), str(_candidate(tmp_path, loop)))
    assert time.monotonic() - started < 20
    assert result["correct"] is False
    assert result["error"]["kind"] == "timeout"
    assert "no answer within 1 s" in result["error"]["message"]
    assert processes_of_this_test("maxcode-bin-") == []


FORKER = r"""
#include <cstdio>
#include <unistd.h>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    int started = 0;
    for (int i = 0; i < 100; i++) {
        pid_t pid = fork();
        if (pid == 0) { sleep(MARKER); _exit(0); }
        if (pid > 0) started++;
    }
    fprintf(stderr, "forked %d children\n", started);
    printf("%lld\n", a + b);
}
"""


def test_children_that_outlive_the_candidate_are_killed_and_reported(tmp_path: Path) -> None:
    marker = 3000 + os.getpid() % 1000
    task = write_task(tmp_path / "t")
    forker = _candidate(tmp_path, FORKER.replace("MARKER", str(marker)))
    started = time.monotonic()
    result = eval_json(str(task), str(forker), "--repeats", "1")
    assert time.monotonic() - started < 60
    assert any("left processes running" in flag for flag in result["flags"]), result["flags"]
    assert processes_of_this_test("maxcode-bin-") == []


WRITER = r"""
#include <cstdio>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    FILE* f = fopen("TARGET", "w");
    if (f) { fputs("escaped", f); fclose(f); }
    printf("%lld\n", a + b);
}
"""


def test_writing_outside_the_scratch_folder_fails(tmp_path: Path) -> None:
    target = tmp_path / "outside" / "escaped.txt"
    target.parent.mkdir()
    os.chmod(target.parent, 0o777)
    task = write_task(tmp_path / "t")
    result = eval_json(str(task), str(_candidate(tmp_path, WRITER.replace("TARGET", str(target)))))
    assert result["compiled"]
    assert not target.exists()
    if result["isolation"] != "bwrap":
        pytest.skip("only bwrap hides folders other users may write")


CONNECTOR = r"""
#include <arpa/inet.h>
#include <cstdio>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(PORT);
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    if (connect(fd, (sockaddr*)&address, sizeof address) == 0) { printf("connected\n"); return 0; }
    perror("connect");
    return 2;
}
"""


def test_network_connection_to_a_local_port_is_refused(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    task = write_task(tmp_path / "t")
    try:
        result = eval_json(
            str(task), str(_candidate(tmp_path, CONNECTOR.replace("PORT", str(port))))
        )
    finally:
        stop.set()
        server.close()
    if result["isolation"] == "rlimits":
        pytest.skip("rlimits gives no network isolation")
    assert accepted == []
    assert result["correct"] is False
    assert result["error"]["kind"] == "runtime_error"
    assert "connect" in result["error"]["message"]


def test_instruction_count_is_the_same_on_repeated_runs(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t")
    candidate = str(
        _candidate(tmp_path, ECHO_SUM.replace("#include <cstdio>", "#include <cstdio>\n"))
    )
    first = eval_json(str(task), candidate, "--metric", "instructions")
    second = eval_json(str(task), candidate, "--metric", "instructions")
    assert first["metric"] == "instructions"
    assert first["candidate_cost"] > 10_000
    assert first["candidate_costs"] == second["candidate_costs"]
    assert first["reference_cost"] == second["reference_cost"]


_SUM_ALL = """#include <cstdio>
int main() {
    long long total = 0, value;
    while (std::scanf("%lld", &value) == 1) total += value;
    std::printf("%lld\\n", total);
}
"""


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_instruction_counts_do_not_depend_on_how_many_cpus_count_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests are counted on all of the process's CPUs at once (``cpp._shares``): each
    test's count, in the tests' order, is the one a single CPU counting them all finds."""
    sizes = [3000, 10, 600, 1, 100]  # the largest first, so the groups' order is not the tests'
    tests = [(" ".join(["7"] * size) + "\n", f"{7 * size}\n") for size in sizes]
    task = load_task(str(write_task(tmp_path / "t", reference=_SUM_ALL, tests=tests)))
    candidate = _SUM_ALL.replace("long long total", "long long value2 = 0, total")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    shared = evaluate_cpp(task, candidate, metric="instructions")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    alone = evaluate_cpp(task, candidate, metric="instructions")
    assert shared.correct and alone.correct, (shared.error, alone.error)
    assert shared.candidate_costs == alone.candidate_costs
    by_size = sorted(zip(sizes, shared.candidate_costs))
    assert [cost for _, cost in by_size] == sorted(shared.candidate_costs)
    assert len(set(shared.candidate_costs)) == len(sizes)


def test_builds_are_cached_by_content(tmp_path: Path) -> None:
    sandbox = Sandbox()
    first = build_cpp(ECHO_SUM, ("-O2",), sandbox)
    again = build_cpp(ECHO_SUM, ("-O2",), sandbox)
    other_flags = build_cpp(ECHO_SUM, ("-O1",), sandbox)
    assert first.ok and not first.cached
    assert again.cached and again.binary == first.binary
    assert not other_flags.cached and other_flags.key != first.key
    failing = build_cpp("int main() { return x; }", ("-O2",), sandbox)
    assert not failing.ok and "x" in failing.diagnostics
    assert build_cpp("int main() { return x; }", ("-O2",), sandbox).cached


FLAKY = r"""
#include <cstdio>
#include <ctime>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    printf("%lld\n", a + b + ((now.tv_nsec / 1000) % 10 == 0));  // wrong one run in ten
}
"""


def test_candidate_wrong_on_a_timed_run_gets_no_reward(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "t")))
    for _ in range(10):
        feedback = evaluate_cpp(task, FLAKY, repeats=20)
        if feedback.tests_passed < feedback.tests_total and not any(
            flag.startswith("nondeterministic") for flag in feedback.flags
        ):
            continue  # wrong already on the first run: try again for the case under test
        break
    assert feedback.correct is False
    assert feedback.speedup == 0
    assert any(flag.startswith("nondeterministic") for flag in feedback.flags), feedback.flags
    assert feedback.error is not None and "repeated run" in feedback.error.message


def test_cli_refuses_cuda_for_cpp_tasks(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t")
    done = run_maxcode("eval", str(task), str(_candidate(tmp_path, ECHO_SUM)), "--device", "cuda")
    assert done.returncode == 2
    assert "C++ tasks run on the CPU" in done.stderr
