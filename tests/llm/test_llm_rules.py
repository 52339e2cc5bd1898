"""The offline rules proposer."""

from __future__ import annotations

import ast
import asyncio
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from maxcode.kinds.cpp.rewrites import (
    const_reference_params,
    endl_to_newline,
    fast_io,
    mask,
    reserve_vectors,
    unordered_maps,
)
from maxcode.llm import (
    NO_MODEL_MESSAGE,
    Completion,
    InMemoryCallLog,
    LLMRequest,
    Message,
    extract_code,
    resolve_model,
    rewrite_variants,
)

CPP_PROGRAM = r"""#include <iostream>
#include <vector>
#include <map>
using namespace std;

// a comment mentioning endl: cout << endl;
long long total(vector<long long> values, int n) {
    long long sum = 0;
    for (int i = 0; i < n; i++) sum += values[i];
    return sum;
}

void bump(vector<long long> values) {
    values[0] += 1;  // changes its own copy: must stay by value
    cout << values[0] << endl;
}

int depth(int u, vector<vector<int>> children) {
    int best = 0;
    for (int c : children[u]) best = max(best, 1 + depth(c, children));
    return best;
}

int main() {
    int n;
    cin >> n;
    vector<long long> a;
    for (int i = 0; i < n; ++i) {
        long long x;
        cin >> x;
        a.push_back(x);
    }
    map<long long, int> seen;
    for (int i = 0; i < n; i++) seen[a[i]]++;
    map<int, int> by_residue;
    for (int i = 0; i < n; i++) by_residue[(int)(a[i] % 7)]++;
    for (auto& entry : by_residue) cout << entry.first << ":" << entry.second << " ";
    cout << endl;
    vector<vector<int>> children(n);
    for (int i = 1; i < n; i++) children[(i - 1) / 2].push_back(i);
    cout << total(a, n) << " " << seen.count(a[0]) << std::endl;
    cout << "depth " << depth(0, children) << "\n";
    cout << "a string with endl in it" << endl;
    bump(a);
    return 0;
}
"""

PROGRAM_INPUT = "8\n5 1 9 3 3 7 2 8\n"

KERNELBENCH_SOURCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled matmul followed by ReLU."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.relu(torch.matmul(a, b) * self.scale)


def get_inputs():
    return [torch.randn(4, 4), torch.randn(4, 4)]


def get_init_inputs():
    return [2.0]
'''


def _request(program: str, language: str = "cpp", n: int = 1) -> LLMRequest:
    return LLMRequest(
        messages=[
            Message(role="system", content="You make programs faster."),
            Message(role="user", content=f"Earlier attempt:\n```{language}\nint old;\n```"),
            Message(role="assistant", content="```cpp\nint answer;\n```"),
            Message(
                role="user",
                content=f"Make this faster:\n```{language}\n{program}```\nReply with code.",
            ),
        ],
        n=n,
    )


def _propose(program: str, language: str = "cpp", n: int = 1) -> list[Completion]:
    provider = resolve_model("rules")
    return asyncio.run(provider.generate(_request(program, language, n)))


def _compile_and_run(source: str, folder: Path, name: str) -> str:
    path = folder / f"{name}.cpp"
    path.write_text(source)
    build = subprocess.run(
        ["g++", "-O0", "-o", str(folder / name), str(path)], capture_output=True, text=True
    )
    assert build.returncode == 0, f"{name} does not compile:\n{build.stderr[:2000]}"
    run = subprocess.run(
        [str(folder / name)], input=PROGRAM_INPUT, capture_output=True, text=True, timeout=10
    )
    assert run.returncode == 0
    return run.stdout


def test_no_model_message() -> None:
    assert NO_MODEL_MESSAGE == (
        "no model configured; using the offline rules proposer; pass --model for LLM search"
    )


def test_cpp_rewrites_are_all_found() -> None:
    [completion] = _propose(CPP_PROGRAM)
    code = extract_code(completion.text, "cpp")
    assert code is not None
    assert code.startswith('#pragma GCC optimize("O3")\n')
    assert "std::ios::sync_with_stdio(false);" in code and "std::cin.tie(nullptr);" in code
    assert "endl" not in mask(code)  # gone from the code, kept in comments and strings
    assert "// a comment mentioning endl: cout << endl;" in code
    assert '"a string with endl in it"' in code
    assert "if (n > 0 && n <= 10000000) a.reserve(n);" in code
    assert "long long total(const vector<long long>& values, int n)" in code
    assert "int depth(int u, const vector<vector<int>>& children)" in code
    assert "void bump(vector<long long> values)" in code  # it writes to its copy
    assert "unordered_map<long long, int> seen;" in code
    assert "map<int, int> by_residue;" in code  # iterated: order matters
    assert completion.cost_usd == 0.0 and completion.prompt_tokens == 0


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_cpp_variants_compile_and_keep_the_output(tmp_path: Path) -> None:
    variants = rewrite_variants(CPP_PROGRAM, "cpp")
    rewrites = set(variants[0].applied)
    assert len(rewrites) == 6
    # Everything at once, then alone each rewrite that changes declarations (the others are
    # line-local and covered by the first): all must compile and print what the original does.
    structural = {("reserve_vectors",), ("const_reference_params",), ("unordered_maps",)}
    checked = [variants[0]] + [v for v in variants if v.applied in structural]
    assert len(checked) == 4
    with ThreadPoolExecutor(max_workers=8) as pool:
        outputs = list(
            pool.map(
                lambda item: _compile_and_run(item[1], tmp_path, f"v{item[0]}"),
                enumerate([CPP_PROGRAM] + [variant.code for variant in checked]),
            )
        )
    assert outputs[0].startswith("0:1 1:2 2:2 3:2 5:1")
    assert all(output == outputs[0] for output in outputs[1:])


def test_variants_rotate_across_n_and_calls() -> None:
    provider = resolve_model("rules")
    request = _request(CPP_PROGRAM, n=3)

    async def run() -> list[str]:
        first = await provider.generate(request)
        second = await provider.generate(request)
        return [completion.text for completion in first + second]

    texts = asyncio.run(run())
    codes = [extract_code(text, "cpp") for text in texts]
    assert len(set(codes)) == 6  # all different
    variants = rewrite_variants(CPP_PROGRAM, "cpp")
    assert codes == [variant.code.rstrip() + "\n" for variant in variants[:6]]
    assert "applied optimize_pragma" in texts[0] and "fast_io" in texts[0]
    assert texts[1].startswith("Offline rules proposer: applied optimize_pragma (")


def test_nothing_applies_returns_the_program_with_a_note() -> None:
    program = '#pragma GCC optimize("O3")\n#include <cstdio>\nint main() { puts("hi"); }\n'
    completions = _propose(program, n=2)
    assert len(completions) == 2
    assert "no rewrite applies" in completions[0].text
    assert extract_code(completions[0].text, "cpp") == program


def test_no_program_in_the_request() -> None:
    provider = resolve_model("rules")
    [completion] = asyncio.run(provider.generate(LLMRequest.from_prompt("just words")))
    assert extract_code(completion.text, "cpp") is None
    assert "no program found" in completion.text


def test_rules_calls_are_logged_free() -> None:
    log = InMemoryCallLog()
    provider = resolve_model("rules", call_log=log)
    asyncio.run(provider.generate(_request(CPP_PROGRAM)))
    [call] = log.calls
    assert call.provider == "rules" and call.cost_usd == 0.0 and call.prompt_tokens == 0


def test_fast_io_is_not_added_when_stdio_is_mixed_in() -> None:
    program = '#include <bits/stdc++.h>\nint main() { int n; scanf("%d", &n); std::cout << n; }\n'
    assert fast_io(program) is None


@pytest.mark.parametrize(
    "body",
    [
        "sort(v.begin(), v.end()); return v[0];",
        "swap(v[0], v[1]); return v[0];",
        "cin >> v[0]; return v[0];",
        "v.push_back(1); return v[0];",
        "for (auto& x : v) x *= 2; return v[0];",
        "v[0]++; return v[0];",
        "touch(v); return v[0];",
    ],
)
def test_vectors_that_are_written_stay_by_value(body: str) -> None:
    program = (
        "#include <bits/stdc++.h>\nusing namespace std;\nvoid touch(vector<int>& w) { w[0] = 1; }\n"
        f"int f(vector<int> v) {{ {body} }}\nint main() {{ vector<int> a = {{2, 1}}; f(a); }}\n"
    )
    assert const_reference_params(program) is None


def test_a_function_with_a_prototype_is_left_alone() -> None:
    program = (
        "#include <vector>\nint f(std::vector<int> v);\n"
        "int main() { return f({1}); }\nint f(std::vector<int> v) { return v[0]; }\n"
    )
    assert const_reference_params(program) is None


@pytest.mark.parametrize(
    "use",
    [
        "cout << m.begin()->first;",
        "for (auto& kv : m) cout << kv.first;",
        "auto it = m.find(1); ++it; cout << it->first;",
        "cout << m.lower_bound(2)->first;",
    ],
)
def test_maps_that_are_walked_in_order_stay_ordered(use: str) -> None:
    program = (
        "#include <bits/stdc++.h>\nusing namespace std;\n"
        f"int main() {{ map<int, int> m; m[3] = 1; m[1] = 2; {use} }}\n"
    )
    assert unordered_maps(program) is None


def test_unordered_map_include_and_namespace_are_added_when_needed() -> None:
    program = (
        "#include <map>\n#include <cstdio>\nint main() { std::map<int, int> m; m[1] = 2; "
        'if (m.find(1) != m.end()) printf("%d", m.at(1)); }\n'
    )
    rewritten = unordered_maps(program)
    assert rewritten is not None
    assert "#include <unordered_map>" in rewritten
    assert "std::unordered_map<int, int> m;" in rewritten


def test_reserve_needs_a_counted_loop_in_the_same_block() -> None:
    inner = (
        "#include <vector>\nint main() { int n = 3; std::vector<int> v;\n"
        "for (int i = 0; i < n; i++) { std::vector<int> v; v.push_back(i); } }\n"
    )
    assert reserve_vectors(inner) is None
    unbounded = (
        "#include <vector>\n#include <iostream>\nint main() { std::vector<int> v; int x;\n"
        "while (std::cin >> x) v.push_back(x); }\n"
    )
    assert reserve_vectors(unbounded) is None
    sized = (
        "#include <vector>\nint main() { std::vector<int> src(5); std::vector<int> v;\n"
        "  for (size_t i = 0; i <= src.size(); ++i) v.push_back(i); }\n"
    )
    assert "  v.reserve(src.size() + 1);\n  for" in (reserve_vectors(sized) or "")


def test_endl_in_literals_and_digit_separators_is_untouched() -> None:
    program = (
        "#include <iostream>\nusing namespace std;\nint main() { "
        "const char* s = R\"(cout << endl;)\"; char q = '\"'; long long big = 1'000; "
        "cout << s << q << big << endl; }\n"
    )
    rewritten = endl_to_newline(program)
    assert rewritten is not None
    assert 'R"(cout << endl;)"' in rewritten and "big << '\\n'; }" in rewritten


# --- KernelBench / PyTorch ------------------------------------------------------------------


@contextmanager
def _fake_torch() -> Iterator[list[str]]:
    """A stand-in ``torch`` recording what the candidate uses (torch may not be installed)."""
    used: list[str] = []
    torch = types.ModuleType("torch")
    nn = types.ModuleType("torch.nn")

    class Module:
        def __call__(self, *args: object, **kwargs: object) -> object:
            return self.forward(*args, **kwargs)  # type: ignore[attr-defined]

    @contextmanager
    def inference_mode() -> Iterator[None]:
        used.append("inference_mode")
        yield

    def compile_function(function: object) -> object:
        used.append("compile")
        return function

    nn.Module = Module  # type: ignore[attr-defined]
    torch.nn = nn  # type: ignore[attr-defined]
    torch.inference_mode = inference_mode  # type: ignore[attr-defined]
    torch.compile = compile_function  # type: ignore[attr-defined]
    torch.relu = lambda x: max(x, 0)  # type: ignore[attr-defined]
    torch.matmul = lambda a, b: a * b  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("torch", "torch.nn")}
    sys.modules["torch"], sys.modules["torch.nn"] = torch, nn
    try:
        yield used
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _run_candidate(code: str) -> tuple[object, object, list[str]]:
    with _fake_torch() as used:
        namespace: dict[str, object] = {}
        exec(compile(code, "candidate.py", "exec"), namespace)
        model_new = namespace["ModelNew"](2.0)  # type: ignore[operator]
        reference = namespace["Model"](2.0)  # type: ignore[operator]
        return model_new(3, 5), reference(3, 5), used


def test_kernelbench_variants() -> None:
    completions = _propose(KERNELBENCH_SOURCE, language="python", n=3)
    codes = [extract_code(completion.text, "python") for completion in completions]
    assert all(code is not None for code in codes) and len(set(codes)) == 3
    both, inference_only, compiled_only = (code or "" for code in codes)
    for code in (both, inference_only, compiled_only):
        tree = ast.parse(code)
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        assert ast.unparse(classes["ModelNew"].bases[0]) == "Model"
        assert "get_inputs" in code and "class Model(nn.Module)" in code
    assert "torch.inference_mode()" in both and "torch.compile(" in both
    assert "torch.inference_mode()" in inference_only and "torch.compile" not in inference_only
    assert "torch.compile(" in compiled_only and "inference_mode" not in compiled_only
    # Run with a stand-in torch: ModelNew computes what Model computes, the way it says.
    assert _run_candidate(both) == (30.0, 30.0, ["compile", "inference_mode"])
    assert _run_candidate(inference_only) == (30.0, 30.0, ["inference_mode"])
    assert _run_candidate(compiled_only) == (30.0, 30.0, ["compile"])


def test_kernelbench_candidate_is_rewritten_again() -> None:
    compiled_only = rewrite_variants(KERNELBENCH_SOURCE, "python")[2].code
    [completion] = _propose(compiled_only, language="python")
    code = extract_code(completion.text, "python") or ""
    assert "class _ModelNewBase1(Model):" in code
    assert "class ModelNew(_ModelNewBase1):" in code
    output, reference, used = _run_candidate(code)
    assert output == reference and used == ["compile", "inference_mode"]


def test_python_without_a_kernelbench_model_is_returned_unchanged() -> None:
    [completion] = _propose("def f(x):\n    return x + 1\n", language="python")
    assert "no rewrite applies" in completion.text
    assert extract_code(completion.text, "python") == "def f(x):\n    return x + 1\n"
