"""``maxcode init``: writes a loadable task.toml; a reference failing its own check is refused
and leaves the earlier task.toml in place."""

from __future__ import annotations

import shutil
from pathlib import Path

from maxcode.kinds.load import load_task
from tests.helpers import run_maxcode

PYTHON = Path(__file__).resolve().parents[2] / "examples" / "project" / "slowpkg"


def test_init_writes_a_task_that_loads_and_refuses_a_failing_check(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    shutil.copytree(PYTHON, folder)
    (folder / "task.toml").unlink()
    done = run_maxcode(
        "init", str(folder), "-e", "slowpkg/*.py", "--check", "python -m pytest -q tests",
        "--bench", "python bench.py", "--no-check",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    task = load_task(str(folder))
    assert task.kind == "project" and task.project is not None
    assert "slowpkg/common.py" in task.project.editable
    written = (folder / "task.toml").read_text()

    failing = run_maxcode(
        "init", str(folder), "-e", "slowpkg/common.py", "--check", "false",
        "--bench", "python bench.py", "--force",
    )  # fmt: skip
    assert failing.returncode == 2
    assert "fails its own check `false`" in failing.stderr
    assert (folder / "task.toml").read_text() == written  # the earlier one is put back
