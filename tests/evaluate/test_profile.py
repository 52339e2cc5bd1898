"""C++ profiles: callgrind dumps read line by line, and the feedback of a slow candidate naming
its hot loop."""

from __future__ import annotations

import json

from maxcode.harness.profile import cpp_profile, parse_callgrind
from maxcode.kinds import evaluate_task
from maxcode.kinds.load import load_task
from maxcode.search.observation import describe_feedback
from tests.conftest import requires_tool
from tests.helpers import EXAMPLES, FIXTURES, run_maxcode

DUMP = """# callgrind format
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
fl=candidate.cpp
fn=main
5 10 2 1 0 1 0 0 0 0
7 100 40 0 0 20 0 0 2 0
calls=1 0
7 5000 900 100
fi=/usr/include/c++/12/bits/stl_vector.h
1046 30 10 0 0 3 0 0 0 0
fe=candidate.cpp
8 60 20 10 0 5 1 0 1 0
fl=helper.cpp
fn=helper
3 800 0 0 0 0 0 0 0 0
summary: 1000 72 11 0 29 1 0 3 0
"""
SOURCE = "\n".join(f"line {number}" for number in range(1, 10))


def test_a_dump_gives_self_costs_per_line_and_function() -> None:
    counts = parse_callgrind(DUMP)
    # The cost line after calls= is the call's inclusive cost: not charged to line 7 itself.
    assert counts.by_line[("candidate.cpp", 7)][:2] == [100, 40]
    assert counts.by_line[("/usr/include/c++/12/bits/stl_vector.h", 1046)][0] == 30
    assert counts.by_line[("candidate.cpp", 8)][0] == 60
    assert counts.by_function == {"main": 200, "helper": 800}
    profile = cpp_profile(counts, SOURCE, "candidate.cpp")
    assert [hot.line for hot in profile.hot_lines] == [7, 8, 5]
    assert profile.hot_lines[0].share == 0.1 and profile.hot_lines[0].text == "line 7"
    assert profile.functions[0].name == "helper" and profile.functions[0].share == 0.8
    assert profile.l1_miss_rate == 30 / 83 and profile.last_level_miss_rate == 3 / 83
    assert [hot.line for hot in profile.missing_lines] == [7, 8, 5]


@requires_tool("valgrind")
def test_the_feedback_of_a_slow_candidate_names_its_hot_loop() -> None:
    task = load_task(str(EXAMPLES / "pair_count_quadratic"))
    feedback = evaluate_task(task, task.reference, repeats=1, profile=True)
    assert feedback.correct and feedback.cpp.profile is not None
    hottest = feedback.cpp.profile.hot_lines[0]
    loop = task.reference.splitlines().index("            if (a[i] + a[j] <= k) ++count;") + 1
    assert hottest.line == loop and hottest.share > 0.3
    assert hottest.text == "if (a[i] + a[j] <= k) ++count;"
    text = describe_feedback(feedback)
    assert f"line {loop} `if (a[i] + a[j] <= k) ++count;` " in text
    assert "Data cache: L1 miss rate" in text
    assert f"hottest line {loop}" in feedback.summary()
    assert feedback.profile_seconds is not None and feedback.profile_seconds > 0
    plain = evaluate_task(task, task.reference, repeats=1)
    assert plain.cpp is None and plain.profile_seconds is None


@requires_tool("valgrind")
def test_maxcode_eval_profile_json() -> None:
    result = run_maxcode(
        "eval",
        str(EXAMPLES / "io_bound_sum"),
        str(FIXTURES / "io_bound_sum" / "fast.cpp"),
        "--profile",
        "--repeats",
        "1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["correct"] and printed["cpp"]["profile"]["hot_lines"]
    assert printed["cpp"]["profile"]["instructions"] > 0 and printed["profile_seconds"] > 0
