"""Finding the program in a model's answer."""

from __future__ import annotations

import pytest

from maxcode.llm import extract_code, find_code_blocks


def test_prose_around_one_block() -> None:
    text = "Here is a faster version:\n\n```cpp\nint main() {}\n```\n\nIt avoids copies."
    assert extract_code(text, "cpp") == "int main() {}\n"


def test_last_complete_block_wins() -> None:
    text = "First try:\n```cpp\nint a;\n```\nBetter:\n```cpp\nint b;\n```\nDone."
    assert extract_code(text, "cpp") == "int b;\n"


@pytest.mark.parametrize("tag", ["cpp", "c++", "cc", "CPP", "cxx"])
def test_cpp_tags(tag: str) -> None:
    assert extract_code(f"```{tag}\nint x;\n```", "cpp") == "int x;\n"


@pytest.mark.parametrize("tag", ["python", "py", "Python3"])
def test_python_tags(tag: str) -> None:
    assert extract_code(f"```{tag}\nx = 1\n```", "python") == "x = 1\n"


def test_language_aliases_of_task_kinds() -> None:
    assert extract_code("```py\nx = 1\n```", "kernelbench") == "x = 1\n"
    assert extract_code("```cpp\nint x;\n```", "c++") == "int x;\n"


def test_tagged_block_preferred_over_later_untagged() -> None:
    text = "```cpp\nint good;\n```\nRun it with:\n```\n./a.out < input.txt\n```\n"
    assert extract_code(text, "cpp") == "int good;\n"


def test_untagged_block_used_when_no_tagged_one() -> None:
    assert extract_code("Answer:\n```\nint x;\n```\n", "cpp") == "int x;\n"


def test_blocks_of_another_language_are_ignored() -> None:
    text = "```bash\ng++ -O2 a.cpp\n```\n"
    assert extract_code(text, "cpp") is None
    assert extract_code("```python\nx = 1\n```", "cpp") is None


def test_unterminated_final_fence_yields_its_rest() -> None:
    text = "Here you go:\n```cpp\n#include <cstdio>\nint main() {\n  return 0;\n"
    assert extract_code(text, "cpp") == "#include <cstdio>\nint main() {\n  return 0;\n"


def test_complete_block_beats_unterminated_one() -> None:
    text = "```cpp\nint done;\n```\nAnd a longer one:\n```cpp\nint cut_off"
    assert extract_code(text, "cpp") == "int done;\n"


def test_no_code_gives_none() -> None:
    assert extract_code("I cannot make this program any faster.", "cpp") is None
    assert extract_code("", "python") is None
    assert extract_code("```cpp\n\n```", "cpp") is None


def test_think_sections_are_skipped() -> None:
    text = "<think>draft:\n```cpp\nint draft;\n```\n</think>\nFinal:\n```\nint final_version;\n```"
    assert extract_code(text, "cpp") == "int final_version;\n"


def test_longer_fences_and_tildes_and_info_strings() -> None:
    text = "````cpp\n```\nnot a close\n```\n````\n"
    assert extract_code(text, "cpp") == "```\nnot a close\n```\n"
    assert extract_code("~~~python\nx = 2\n~~~", "python") == "x = 2\n"
    assert extract_code("```cpp title=main.cpp\nint y;\n```", "cpp") == "int y;\n"


def test_find_code_blocks_reports_tags_and_completeness() -> None:
    blocks = find_code_blocks("```py\na\n```\ntext\n```\nb")
    assert [(b.tag, b.code, b.complete) for b in blocks] == [
        ("py", "a\n", True),
        ("", "b\n", False),
    ]
