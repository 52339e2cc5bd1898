"""Loading task folders and PIE rows, and the one-line errors for malformed tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxcode.errors import TaskError
from maxcode.kinds.load import load_task
from maxcode.tasks.model import FLOAT_ABS_TOL, FLOAT_REL_TOL
from tests.helpers import EXAMPLES, run_maxcode, write_task


def test_task_folder_loads_with_tests_in_numeric_order(tmp_path: Path) -> None:
    tests = [(f"{i} 1\n", f"{i + 1}\n") for i in range(12)]
    task = load_task(str(write_task(tmp_path / "t", tests=tests)))
    assert task.name == "sum"
    assert task.kind == "cpp"
    assert [test.index for test in task.tests] == list(range(12))
    assert task.compile_flags == ("-O3", "-std=c++17")
    assert "scanf" in task.reference


def test_task_toml_sets_flags_and_limits(tmp_path: Path) -> None:
    toml = 'kind = "cpp"\ncompile_flags = ["-O2"]\ntimeout_s = 2.5\nrepeats = 3\n'
    task = load_task(str(write_task(tmp_path / "named-by-folder", toml=toml)))
    assert task.name == "named-by-folder"
    assert task.compile_flags == ("-O2",)
    assert task.timeout_s == 2.5
    assert task.repeats == 3


def test_every_bundled_example_loads() -> None:
    folders = sorted(path for path in EXAMPLES.iterdir() if path.is_dir())
    assert len(folders) >= 8
    for folder in folders:
        task = load_task(str(folder))
        assert len(task.tests) >= 5, folder
        assert task.description, folder


def _break(folder: Path, how: str) -> None:
    if how == "no reference":
        (folder / "reference.cpp").unlink()
    elif how == "no tests":
        for path in (folder / "tests").iterdir():
            path.unlink()
    elif how == "input without output":
        (folder / "tests" / "output.1.txt").unlink()
    elif how == "output without input":
        (folder / "tests" / "input.0.txt").unlink()
    elif how == "bad toml":
        (folder / "task.toml").write_text('name = "unterminated\n')
    elif how == "unknown key":
        (folder / "task.toml").write_text('kind = "cpp"\ntimeout = 3\n')
    elif how == "wrong type":
        (folder / "task.toml").write_text('kind = "cpp"\ntimeout_s = "soon"\n')
    elif how == "unreadable test":
        (folder / "tests" / "input.0.txt").unlink()
        (folder / "tests" / "input.0.txt").mkdir()
    elif how == "binary reference":
        (folder / "reference.cpp").write_bytes(b"\xff\xfe\x00int main")
    elif how == "no task.toml":
        (folder / "task.toml").unlink()


BROKEN = {
    "no reference": "no reference.cpp",
    "no tests": "no tests",
    "input without output": "input.1.txt has no output.1.txt",
    "output without input": "output.0.txt has no input.0.txt",
    "bad toml": "not valid TOML",
    "unknown key": "timeout: Extra inputs are not permitted",
    "wrong type": "timeout_s",
    "unreadable test": "cannot be read",
    "binary reference": "not UTF-8",
    "no task.toml": "no task.toml",
}


@pytest.mark.parametrize("how", sorted(BROKEN))
def test_malformed_task_is_a_task_error(tmp_path: Path, how: str) -> None:
    folder = write_task(tmp_path / "t")
    _break(folder, how)
    with pytest.raises(TaskError, match=BROKEN[how]):
        load_task(str(folder))


@pytest.mark.parametrize("how", ["no reference", "bad toml", "input without output"])
def test_malformed_task_exits_2_with_one_line(tmp_path: Path, how: str) -> None:
    folder = write_task(tmp_path / "t")
    _break(folder, how)
    candidate = tmp_path / "c.cpp"
    candidate.write_text("int main() {}")
    done = run_maxcode("eval", str(folder), str(candidate), "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert BROKEN[how] in lines[0]


def test_missing_task_and_missing_candidate_exit_2(tmp_path: Path) -> None:
    done = run_maxcode("eval", str(tmp_path / "nope"), str(tmp_path / "c.cpp"))
    assert done.returncode == 2 and "task not found" in done.stderr
    folder = write_task(tmp_path / "t")
    done = run_maxcode("eval", str(folder), str(tmp_path / "missing.cpp"))
    assert done.returncode == 2 and "candidate not found" in done.stderr
    assert "Traceback" not in done.stderr


def _pie(tmp_path: Path) -> tuple[Path, Path]:
    tests_root = tmp_path / "merged_test_cases"
    for problem, cases in {"p00001": [("1 2\n", "3\n"), ("5 5\n", "10\n")]}.items():
        (tests_root / problem).mkdir(parents=True)
        for index, (given, expected) in enumerate(cases):
            (tests_root / problem / f"input.{index}.txt").write_text(given)
            (tests_root / problem / f"output.{index}.txt").write_text(expected)
    rows = [
        {
            "problem_id": "p00001",
            "src_id": "s111",
            "src_code": "// row 0\nint main(){}",
            "user_id": "u1",
        },
        {
            "problem_id": "p00001",
            "src_id": "s222",
            "src_code": "// row 1\nint main(){}",
            "tests": [1],
        },
    ]
    jsonl = tmp_path / "test.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return jsonl, tests_root


def test_pie_row_by_number_and_by_src_id(tmp_path: Path) -> None:
    jsonl, tests_root = _pie(tmp_path)
    first = load_task(f"{jsonl}#0", pie_tests=tests_root)
    assert first.name == "p00001_s111"
    assert "row 0" in first.reference
    assert [test.index for test in first.tests] == [0, 1]
    assert first.extra["user_id"] == "u1"
    second = load_task(f"{jsonl}#s222", pie_tests=tests_root)
    assert "row 1" in second.reference
    assert [test.index for test in second.tests] == [1]


def test_pie_tests_folder_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jsonl, tests_root = _pie(tmp_path)
    with pytest.raises(TaskError, match="MAXCODE_PIE_TESTS"):
        load_task(f"{jsonl}#0")
    monkeypatch.setenv("MAXCODE_PIE_TESTS", str(tests_root))
    assert load_task(f"{jsonl}#1").name == "p00001_s222"


def test_pie_errors(tmp_path: Path) -> None:
    jsonl, tests_root = _pie(tmp_path)
    with pytest.raises(TaskError, match="no row '7'"):
        load_task(f"{jsonl}#7", pie_tests=tests_root)
    with pytest.raises(TaskError, match="suite of PIE rows"):
        load_task(str(jsonl))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem_id": "p00001"}\nnot json\n')
    with pytest.raises(TaskError, match="no src_code"):
        load_task(f"{broken}#0", pie_tests=tests_root)
    with pytest.raises(TaskError, match="not valid JSON"):
        load_task(f"{broken}#1", pie_tests=tests_root)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"problem_id": "p9", "src_code": "x"}) + "\n")
    with pytest.raises(TaskError, match="no tests folder"):
        load_task(f"{missing}#0", pie_tests=tests_root)


def test_float_tolerances_default_and_load_from_task_toml(tmp_path: Path) -> None:
    plain = load_task(str(write_task(tmp_path / "plain")))
    assert (plain.float_abs_tol, plain.float_rel_tol) == (FLOAT_ABS_TOL, FLOAT_REL_TOL)
    toml = 'kind = "cpp"\nfloat_abs_tol = 1e-4\nfloat_rel_tol = 0\n'
    task = load_task(str(write_task(tmp_path / "tolerant", toml=toml)))
    assert (task.float_abs_tol, task.float_rel_tol) == (1e-4, 0.0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("float_abs_tol = -1e-6", "float_abs_tol: Input should be greater than or equal to 0"),
        ("float_rel_tol = -0.5", "float_rel_tol: Input should be greater than or equal to 0"),
        ("float_rel_tol = 1", "float_rel_tol: Input should be less than 1"),
        ("float_abs_tol = nan", "float_abs_tol: Input should be a finite number"),
        ("float_abs_tol = inf", "float_abs_tol: Input should be a finite number"),
        ('float_abs_tol = "1e-3"', "float_abs_tol: Input should be a valid number"),
        ("float_rel_tol = true", "float_rel_tol: Input should be a valid number"),
        ("float_tol = 1e-3", "float_tol: Extra inputs are not permitted"),
    ],
)
def test_bad_float_tolerance_is_a_one_line_task_error(
    tmp_path: Path, line: str, message: str
) -> None:
    folder = write_task(tmp_path / "t", toml=f'kind = "cpp"\n{line}\n')
    with pytest.raises(TaskError) as raised:
        load_task(str(folder))
    assert str(raised.value) == f"{folder / 'task.toml'}: {message}"


def test_pie_row_may_carry_float_tolerances(tmp_path: Path) -> None:
    _, tests_root = _pie(tmp_path)
    rows = [
        {"problem_id": "p00001", "src_code": "int main(){}", "float_abs_tol": 1e-4},
        {"problem_id": "p00001", "src_code": "int main(){}", "float_rel_tol": -1},
    ]
    jsonl = tmp_path / "tolerant.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    task = load_task(f"{jsonl}#0", pie_tests=tests_root)
    assert (task.float_abs_tol, task.float_rel_tol) == (1e-4, FLOAT_REL_TOL)
    assert "float_abs_tol" not in task.extra
    with pytest.raises(TaskError, match=r"#1: float_rel_tol: Input should be greater than or"):
        load_task(f"{jsonl}#1", pie_tests=tests_root)
