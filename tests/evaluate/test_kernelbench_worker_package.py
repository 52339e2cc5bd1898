"""The worker's package is what the sandbox runs: copied whole, importing nothing of maxcode's,
reading a typed spec that refuses what it does not know."""

from __future__ import annotations

import ast
import json

import pytest

from maxcode.kinds.kernelbench.runner import Job, worker_sources
from maxcode.kinds.kernelbench.worker.protocol import Phase, Side, WorkerSpec
from maxcode.kinds.load import load_task
from tests.helpers import REPO

PROBLEM = REPO / "examples" / "kernelbench" / "1_ScaledGELU.py"


def test_the_worker_imports_only_the_stdlib_torch_triton_and_itself() -> None:
    allowed = {"torch", "triton", "__main__"}
    for module, text in worker_sources():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # its own package
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for imported in names:
                top = imported.split(".")[0]
                assert top == "__future__" or top in allowed or _stdlib(top), (module, imported)


def _stdlib(name: str) -> bool:
    import sys

    return name in sys.stdlib_module_names


def test_a_job_holds_the_whole_package_readable_by_the_run_and_writable_by_none_of_it() -> None:
    job = Job.write(load_task(str(PROBLEM)), "class ModelNew: pass\n")
    try:
        copied = sorted(path.name for path in job.worker.iterdir())
        assert copied == [name for name, _ in worker_sources()]
        assert {"__main__.py", "protocol.py", "main.py"} <= set(copied)
        # The runs are other users: they read the package and can change none of it.
        for path in [job.worker, *job.worker.iterdir()]:
            mode = path.stat().st_mode
            assert mode & 0o004 and not mode & 0o022, path
    finally:
        job.remove()


def test_the_spec_refuses_what_it_does_not_know_and_travels_whole() -> None:
    spec = WorkerSpec(
        role="reference",
        problem="p.py",
        candidate="c.py",
        device="cpu",
        init_seed=1,
        warmup_seeds=[2, 3],
        overrides={"N": 4},
    )
    assert WorkerSpec.loads(spec.dumps()) == spec
    with pytest.raises(ValueError):
        WorkerSpec.loads(json.dumps({**json.loads(spec.dumps()), "check_seeds": [5]}))


def test_names_travel_as_their_values() -> None:
    message = json.loads(json.dumps({"phase": Phase.PAIRS, "side": Side.CANDIDATE}))
    assert message == {"phase": "K", "side": "candidate"}
    assert f"{Phase.IDENTITY}" == "O" and Phase("C") is Phase.COMPILE
