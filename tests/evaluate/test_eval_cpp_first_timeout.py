"""A C++ candidate that times out on one test is not run on the rest: the first timeout
decides, and a program that hangs costs one test's timeout, not every test's."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import eval_json, write_task

# Hangs on the third test only (its first number is 3): the tests before it pass.
HANGS_ON_THREE = """#include <cstdio>
int main() {
    long long a, b;
    if (scanf("%lld %lld", &a, &b) != 2) return 1;
    if (a == 3) { volatile unsigned long x = 0; for (;;) x++; }
    printf("%lld\\n", a + b);
}
"""


def test_the_first_timeout_decides_and_the_rest_are_not_run(tmp_path: Path) -> None:
    tests = [(f"{index} 1\n", f"{index + 1}\n") for index in range(1, 8)]
    task = write_task(tmp_path / "t", tests=tests, toml='kind = "cpp"\ntimeout_s = 1\n')
    candidate = tmp_path / "hangs.cpp"
    candidate.write_text(HANGS_ON_THREE)
    result = eval_json(str(task), str(candidate))
    assert result["correct"] is False
    assert result["error"]["kind"] == "timeout"
    assert result["tests_total"] == 7 and result["tests_passed"] == 2
    # Tests 0 and 1 passed, test 2 timed out; tests 3 to 6 were never run.
    assert [(test["index"], test["status"]) for test in result["tests"]] == [
        (0, "passed"), (1, "passed"), (2, "timeout"),
    ]  # fmt: skip
