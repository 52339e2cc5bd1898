"""The Python face: ``maxcode.evaluate``, ``optimize``, ``bench`` and ``load_task`` do what the
commands do, take the commands' long options as keywords, and fail with the same one-line
``MaxcodeError``s; ``import maxcode`` stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

import maxcode
from maxcode.cli import main
from maxcode.harness.settings import EvalRequest
from maxcode.kinds.cpp.evaluate_cpp import WALL_MIN_ROUNDS
from maxcode.search.config import SearchConfig
from tests.helpers import EXAMPLES, FIXTURES, make_hermetic

TASK = EXAMPLES / "io_bound_sum"
FAST = FIXTURES / "io_bound_sum" / "fast.cpp"


def _long_options(command: str) -> set[str]:
    found = main.get_command(click.Context(main), command)
    assert found is not None
    return {
        name.removeprefix("--").replace("-", "_")
        for param in found.params
        if isinstance(param, click.Option)
        for name in param.opts
    }


def test_the_keywords_are_the_commands_long_options() -> None:
    assert set(EvalRequest.model_fields) <= _long_options("eval")
    assert set(SearchConfig.model_fields) - {"observation"} <= _long_options("optimize")
    for model in (EvalRequest, SearchConfig):
        for name, field in model.model_fields.items():
            # Each generated option's help is its field's docstring: every field has one.
            assert field.description and field.description[0].isalnum(), (model, name)


def test_import_maxcode_loads_neither_the_harness_nor_torch() -> None:
    code = (
        "import sys, maxcode; "
        "heavy = ('torch', 'maxcode.harness', 'maxcode.kinds', 'maxcode.search'); "
        "print(json.dumps([name for name in heavy if name in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == []


def test_evaluate_a_file_or_the_source_itself_as_the_docs_show() -> None:
    done = subprocess.run(
        [
            sys.executable, "-c",
            "import maxcode, sys; f = maxcode.evaluate(sys.argv[1], sys.argv[2]); "
            "print(f.model_dump_json())",
            str(TASK), str(FAST),
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    from_file = json.loads(done.stdout)
    assert from_file["correct"] and from_file["tests_passed"] == from_file["tests_total"]
    assert from_file["repeats"] >= WALL_MIN_ROUNDS and from_file["speedup_interval"] is not None
    task = maxcode.load_task(TASK)
    from_text = maxcode.evaluate(task, FAST.read_text(), metric="instructions")
    assert from_text.correct and from_text.metric == "instructions"
    assert from_text.tests_passed == from_text.tests_total == len(task.tests)


def test_bad_input_is_the_commands_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(maxcode.MaxcodeError, match=r"^task not found: .*nowhere$"):
        maxcode.evaluate(tmp_path / "nowhere", FAST)
    with pytest.raises(maxcode.MaxcodeError, match=r"^check_scal: Extra inputs"):
        maxcode.evaluate(TASK, FAST, check_scal=0.5)
    with pytest.raises(maxcode.MaxcodeError, match="--check-scale is for KernelBench tasks"):
        maxcode.evaluate(TASK, FAST, check_scale=0.5)
    with pytest.raises(maxcode.MaxcodeError, match=r"^depth: Input should be greater"):
        maxcode.optimize(TASK, depth=0, store=tmp_path / "runs.db")


def test_optimize_and_bench_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_hermetic(monkeypatch, tmp_path / "home")
    store = tmp_path / "runs.db"
    summary = maxcode.optimize(
        TASK, depth=1, candidates=2, store=store, output=tmp_path / "best.cpp", profile=False,
        maxcode=True,
    )  # fmt: skip
    assert isinstance(summary, maxcode.RunSummary)
    from maxcode.store import open_store

    recorded = open_store(store).get_run(summary.run_id)
    assert recorded is not None  # --maxcode's observation, as the command line gives it
    assert recorded.config["observation"] == ["trajectory", "critique", "best"]
    assert summary.status == "done" and summary.evaluations >= 1
    # Where the run wrote its best program, not how fast it measured.
    assert Path(summary.best_program) == tmp_path / "best.cpp" and (tmp_path / "best.cpp").is_file()
    compared = maxcode.bench(
        [TASK], methods=["best-of-n"], store=store, candidates=2, profile=False
    )
    assert [row["label"] for row in compared["methods"]] == ["best-of-n"]
    assert compared["tasks"] == [str(TASK)]


def test_the_search_packages_face_is_what_a_user_may_import() -> None:
    import maxcode.search as search

    assert set(search.__all__) == {
        "MAXCODE_PARTS", "METHODS", "PARTS", "SearchConfig", "RunSummary", "new_run",
        "run_search", "run_search_async", "Search", "SearchOutcome", "Node", "Method",
        "make_method", "Critic", "LLMCritic", "TemplateCritic", "ValueFunction", "make_value",
    }  # fmt: skip
    for name in search.__all__:
        assert getattr(search, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'summarize'"):
        _ = search.summarize  # internal: maxcode.search.driver.summarize
