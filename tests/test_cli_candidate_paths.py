"""A candidate named on the command line is read as the user reads it: a link to a file is
that file; a dangling link, or a link to a folder, is one line of error, never a traceback and
never its target's content."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import EXAMPLES, run_maxcode

TASK = EXAMPLES / "prime_sieve"


def test_a_link_to_a_program_is_evaluated_as_that_program(tmp_path: Path) -> None:
    link = tmp_path / "candidate.cpp"
    link.symlink_to(TASK / "reference.cpp")
    done = run_maxcode("eval", str(TASK), str(link), "--json")
    assert done.returncode == 0, done.stderr
    assert '"correct": true' in done.stdout


def test_a_dangling_link_or_a_link_to_a_folder_is_one_line(tmp_path: Path) -> None:
    dangling = tmp_path / "gone.cpp"
    dangling.symlink_to(tmp_path / "nowhere" / "x.cpp")
    done = run_maxcode("eval", str(TASK), str(dangling))
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: candidate not found: {dangling}"
    folder = tmp_path / "folder.cpp"
    folder.symlink_to(tmp_path)
    done = run_maxcode("eval", str(TASK), str(folder))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Is a directory" in done.stderr
    assert "Traceback" not in done.stderr
