"""Shared fixtures: every test runs with its own MAXCODE_HOME, never the user's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import SCRATCH_ROOTS, make_hermetic

OPT_IN_MARKERS = {
    "gpu": "needs a CUDA GPU; run with MAXCODE_TEST_GPU=1",
    "slow": "slow; run with MAXCODE_TEST_SLOW=1",
    "api": "calls a real LLM provider; run with MAXCODE_TEST_API=1",
}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the tests' temporary folders (``make_hermetic``); each worker its own."""
    for folder in SCRATCH_ROOTS:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, reason in OPT_IN_MARKERS.items():
            if marker in item.keywords and os.environ.get(f"MAXCODE_TEST_{marker.upper()}") != "1":
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def hermetic_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point all maxcode state at a temporary folder."""
    return make_hermetic(monkeypatch, tmp_path_factory.mktemp("maxcode-home"))


def requires_tool(name: str) -> pytest.MarkDecorator:
    """Skip a test when a command-line tool is missing."""
    return pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed")
