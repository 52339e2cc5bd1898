"""Multi-file answers of project tasks: named blocks, SEARCH/REPLACE edits, unified diffs; a
failed edit becomes a bundle that carries the reason (a build error for the policy)."""

from __future__ import annotations

from pathlib import Path

from maxcode.kinds.load import load_task
from maxcode.kinds.project.edits import apply_unified_diff, extract_project
from maxcode.kinds.project.spec import parse_bundle, render_bundle

REPO = Path(__file__).resolve().parents[2]
TASK = load_task(str(REPO / "examples" / "project" / "slowpkg"))
assert TASK.project is not None
SPEC = TASK.project
FILES = parse_bundle(TASK.reference).files


def test_bundle_round_trip_keeps_files_with_fences() -> None:
    files = {"a/doc.py": 'X = """\n```python\ncode\n```\n"""\n', "b.py": "y = 1\n"}
    assert parse_bundle(render_bundle(files)).files == files


def test_named_blocks_replace_only_the_files_named() -> None:
    answer = (
        "I used a set.\n\n```python slowpkg/common.py\ndef count_common(a, b):\n    return 0\n```\n"
    )
    files = parse_bundle(extract_project(answer, TASK.reference, SPEC) or "").files
    assert files["slowpkg/common.py"].startswith("def count_common(a, b):")
    assert files["slowpkg/paths.py"] == FILES["slowpkg/paths.py"]


def test_a_path_line_before_the_block_names_it() -> None:
    answer = "File: `slowpkg/paths.py`\n```python\nX = 1\n```\n"
    files = parse_bundle(extract_project(answer, TASK.reference, SPEC) or "").files
    assert files["slowpkg/paths.py"] == "X = 1\n"


def test_search_replace_edits_apply_in_order() -> None:
    answer = (
        "slowpkg/paths.py\n```python\n<<<<<<< SEARCH\n    if rows == 1 or cols == 1:\n"
        "        return 1\n=======\n    if rows <= 1 or cols <= 1:\n        return 1\n"
        ">>>>>>> REPLACE\n```\n"
    )
    bundle = extract_project(answer, TASK.reference, SPEC) or ""
    parsed = parse_bundle(bundle)
    assert parsed.error is None
    assert "if rows <= 1 or cols <= 1:" in parsed.files["slowpkg/paths.py"]


def test_failed_edits_give_a_bundle_with_the_reason() -> None:
    missing = (
        "slowpkg/paths.py\n<<<<<<< SEARCH\n    return 42\n=======\n    return 0\n>>>>>>> REPLACE\n"
    )
    unknown = "nowhere/x.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
    unterminated = "slowpkg/paths.py\n<<<<<<< SEARCH\n    return 1\n=======\n    return 2\n"
    reasons = []
    for answer in (missing, unknown, unterminated):
        parsed = parse_bundle(extract_project(answer, TASK.reference, SPEC) or "")
        assert parsed.error is not None
        assert parsed.files == FILES  # the parent's files, unchanged
        reasons.append(parsed.error)
    assert "not in slowpkg/paths.py" in reasons[0]
    assert "unknown file 'nowhere/x.py'" in reasons[1]
    assert "REPLACE" in reasons[2]


def test_an_answer_without_code_is_none() -> None:
    assert extract_project("I cannot make it faster.", TASK.reference, SPEC) is None


def test_unified_diff_applies_to_the_editable_file() -> None:
    diff = (REPO / "tests" / "project" / "fixtures" / "slowpkg" / "wrong.diff").read_text()
    files = apply_unified_diff(diff, FILES, SPEC)
    assert "len(set(ids) & set(others))" in files["slowpkg/common.py"]
    assert "for item in ids:" in files["slowpkg/common.py"]  # first_shared is untouched
