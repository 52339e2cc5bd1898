"""Deduplication that ignores comments and formatting: programs that differ only there cost one
evaluation; programs that differ in code (a string, a macro, an include) are never merged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from maxcode.executors import EvalJob, Executor
from maxcode.kinds.load import load_task
from maxcode.llm import ProviderSettings, ScriptedProvider
from maxcode.search import Search, SearchConfig, TemplateCritic, make_method
from maxcode.search.program_key import cpp_tokens, legacy_key, program_key
from maxcode.search.tree import load_tree
from maxcode.store import RunStore
from maxcode.types import Feedback
from tests.helpers import REPO
from tests.search.scripted import ScriptedExecutor, feedback_of, scripted_search

MARK = "#pragma candidate 1 reward 2.0\n"
PROGRAM = (
    MARK
    + """#include <cstdio>
// Sums the numbers on standard input.
int main() {
    long long total = 0, x;
    while (std::scanf("%lld", &x) == 1) total += x;  /* one pass */
    std::printf("%lld\\n", total);
}
"""
)
REFORMATTED = (
    MARK
    + """#include <cstdio>   // stdio only
/* A different comment,
   over two lines. */
int main()
{
  long long total=0,x;
  while(std::scanf("%lld",&x)==1)
      total+=x;
  std::printf( "%lld\\n" , total );
}
"""
)


def fenced(source: str) -> str:
    return f"```cpp\n{source}```"


def test_comments_and_formatting_cost_one_evaluation(tmp_path: Path) -> None:
    replies = [fenced(PROGRAM), fenced(REFORMATTED)]
    store, search = scripted_search(tmp_path, replies, method="best-of-n", candidates=2)
    outcome = asyncio.run(search.run())
    assert isinstance(search.executor, ScriptedExecutor)
    assert len(search.executor.jobs) == 1
    first, second = outcome.nodes[1:]
    assert first.duplicate_of is None and second.duplicate_of == first.node_id
    assert first.reward == second.reward == 2.0
    assert store.count_evaluations("r1") == 1
    # The stored run reads back the same way (report, rtg export, --resume).
    loaded = load_tree(store, "r1")
    assert [node.duplicate_of for node in loaded[1:]] == [None, first.node_id]
    assert all(node.reward == 2.0 for node in loaded[1:])


@pytest.mark.parametrize(
    "changed",
    [
        PROGRAM.replace('"%lld\\n"', '"%lld \\n"'),  # a string literal
        PROGRAM.replace("#include <cstdio>", "#include <cstdio>\n#define total total"),
        PROGRAM.replace("#include <cstdio>", "#include <stdio.h>\n#include <cstdio>"),
        PROGRAM.replace("total += x", "total -= -x"),
    ],
    ids=["string", "macro", "include", "operators"],
)
def test_programs_that_differ_in_code_are_each_evaluated(tmp_path: Path, changed: str) -> None:
    replies = [fenced(PROGRAM), fenced(changed)]
    _, search = scripted_search(tmp_path, replies, method="best-of-n", candidates=2)
    outcome = asyncio.run(search.run())
    assert isinstance(search.executor, ScriptedExecutor)
    assert len(search.executor.jobs) == 2
    assert [node.duplicate_of for node in outcome.nodes[1:]] == [None, None]


# --- the tokenizer on tricky input -----------------------------------------------------------

SAME = [
    ("int a = 1; // x\n", "int a=1;\n\n/* y */"),
    ('#include "a.h" // why\nint b;', '#include "a.h"\nint   b;'),
    ("#define A(x) (x)  // macro\n", "#  define A(x) (x)\n"),
    ("#define LONG a \\\n  + b\nint c;", "#define LONG a + b\nint c;"),
    ("in\\\nt d;", "int d;"),  # a line splice joins the halves of a word
    ('auto s = "a" /* c */ "b";', 'auto s = "a"\n"b";'),
    ("x = a\\\n// b\n;", "x = a;"),  # a line comment spliced onto the next line ends there
]
DIFFERENT = [
    ('auto s = "// not a comment";', 'auto s = "";'),
    ('auto s = "/* not */ a";', 'auto s = " a";'),
    ("char c = '\"'; int e; // \"\n", "char c = '\"'; // \"\n"),
    ('auto s = "a\\" // b";', 'auto s = "a\\"";'),
    ('auto r = R"(a // b)";', 'auto r = R"(a )";'),
    ('auto r = R"x(a )" /* b */ )x";', 'auto r = R"x(a )"  )x";'),
    ('auto r = R"(a\\\nb)";', 'auto r = R"(ab)";'),  # no splice inside a raw string
    ("#define A B\n", "#define AB\n"),
    ("#define F(x) x\n", "#define F (x) x\n"),
    ("#include <a//b.h>\n", "#include <a.h>\n"),
    ("// c \\\nint hidden;\nint f;", "// c\nint hidden;\nint f;"),
    ("x = a - -b;", "x = a--b;"),
    ("x = a + +b;", "x = a++b;"),
    ("x = 1 .5;", "x = 1.5;"),
    ("auto y = 1'000;", "auto y = 1000;"),
    ("int g = '/'; /* '*/ int h;", "int g = '/';"),
    ('auto u = u8"x";', 'auto u = u8 "x";'),
    # a macro that spells its argument: spacing in the call is seen by the program
    ("#define S(x) #x\nauto s = S(a+b);", "#define S(x) #x\nauto s = S(a + b);"),
    ("int line = __LINE__;", "\nint line = __LINE__;"),
]


@pytest.mark.parametrize(("one", "other"), SAME)
def test_the_same_program_written_differently(one: str, other: str) -> None:
    assert program_key(one, "cpp") == program_key(other, "cpp")


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_different_code_is_never_merged(one: str, other: str) -> None:
    assert program_key(one, "cpp") != program_key(other, "cpp")


def test_unreadable_source_falls_back_to_the_whitespace_key() -> None:
    unterminated = 'auto s = "open;\n'
    assert program_key(unterminated, "cpp") == legacy_key(unterminated)
    assert program_key("def f(:\n", "python") == legacy_key("def f(:\n")
    assert cpp_tokens("#include <x>\nint a;") == ["#", "include", " ", "<x>", "\n", "int", "a", ";"]


# --- Python kernels ---------------------------------------------------------------------------

KERNEL = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
// the fused kernel
__global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }
"""
module = load_inline(name="scale", cpp_sources="void scale();", cuda_sources=cuda_source)


class ModelNew(torch.nn.Module):
    """Docstrings are code: __doc__ can be read."""

    def forward(self, x):  # comment
        return x * 2.0
'''
KERNEL_COMMENTED = (
    KERNEL.replace("// the fused kernel", "/* fused */")
    .replace("x[i] *= 2.0f; }", "x[i] *= 2.0f;  // in place\n}")
    .replace("# comment", "# another comment\n        # and one more")
    .replace("return x * 2.0", "return (x * 2.0)")
)


def test_python_kernels_differing_in_comments_share_a_key() -> None:
    assert program_key(KERNEL, "python") == program_key(KERNEL_COMMENTED, "python")
    for changed in (
        KERNEL.replace("x[i] *= 2.0f", "x[i] *= 3.0f"),  # the CUDA code
        KERNEL.replace("are code", "are text"),  # a docstring
        KERNEL.replace("x * 2.0", "x * 2"),
        # The C++ string is printed too: its comments are seen, it is not normalised.
        KERNEL + "print(cuda_source)\n",
    ):
        assert program_key(KERNEL, "python") != program_key(changed, "python")
    printed = KERNEL + "print(cuda_source)\n"
    assert program_key(printed, "python") != program_key(
        printed.replace("// the fused kernel", "/* fused */"), "python"
    )


class CountingExecutor(Executor):
    def __init__(self) -> None:
        self.jobs: list[EvalJob] = []

    async def evaluate(self, job: EvalJob) -> Feedback:
        self.jobs.append(job)
        return feedback_of(1.5, job.task.name)


def test_python_kernels_differing_in_comments_cost_one_evaluation(tmp_path: Path) -> None:
    task = load_task(str(REPO / "tests" / "fixtures" / "kernelbench" / "cheats" / "problem.py"))
    config = SearchConfig.model_validate(
        {"model": "scripted", "method": "best-of-n", "candidates": 2}
    )
    store = RunStore(tmp_path / "runs.db")
    store.create_run("r1", task.name, task.name, task.kind, config.method, config.model_dump())
    replies = [f"```python\n{KERNEL}```", f"```python\n{KERNEL_COMMENTED}```"]
    executor = CountingExecutor()
    search = Search(
        run_id="r1",
        task=task,
        config=config,
        store=store,
        policy=ScriptedProvider(
            settings=ProviderSettings(call_log=store.call_log("r1")), replies=replies, cycle=True
        ),
        critic=TemplateCritic(),
        executor=executor,
        method=make_method(config),
    )
    outcome = asyncio.run(search.run())
    assert len(executor.jobs) == 1
    assert [node.duplicate_of for node in outcome.nodes[1:]] == [None, "1.0"]


# --- runs recorded before comment-blind deduplication -----------------------------------------


def test_an_old_run_keeps_its_evaluations_and_shares_them_with_new_programs(
    tmp_path: Path,
) -> None:
    """Two programs an old run evaluated apart (they differ only in a comment) stay apart, each
    with its own verdict; a later program equal to them up to comments shares the first's."""
    replies = [fenced(PROGRAM), fenced(PROGRAM.replace("one pass", "a single pass"))]
    store, search = scripted_search(tmp_path, replies, method="best-of-n", candidates=2)
    # What an old run stored: each program's verdict under its whitespace key.
    for index, (source, reward) in enumerate([(replies[0], 2.0), (replies[1], 3.0)]):
        program = source.removeprefix("```cpp\n").removesuffix("```")
        store.put_evaluation("r1", legacy_key(program), f"sha{index}", feedback_of(reward), 1.0)
    outcome = asyncio.run(search.run())
    assert isinstance(search.executor, ScriptedExecutor)
    assert search.executor.jobs == []  # both verdicts found, none made again
    assert [node.reward for node in outcome.nodes[1:]] == [2.0, 3.0]
    assert [node.duplicate_of for node in outcome.nodes[1:]] == [None, None]
    loaded = load_tree(store, "r1")
    assert [(node.reward, node.duplicate_of) for node in loaded[1:]] == [(2.0, None), (3.0, None)]
