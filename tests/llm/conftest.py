"""Fixtures of the LLM layer's tests: the fake server, quick retries, a closed port."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from maxcode.llm import RetryPolicy
from tests.llm.fake_llm_server import FakeLLMServer


@pytest.fixture
def fake_server() -> Iterator[FakeLLMServer]:
    """A fresh fake LLM server for one test."""
    server = FakeLLMServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def fast_retry() -> RetryPolicy:
    """Retries with delays short enough for tests."""
    return RetryPolicy(
        max_retries=2,
        base_delay_s=0.01,
        max_delay_s=0.05,
        max_retry_after_s=0.2,
        connect_retries=2,
        connect_delay_s=0.01,
    )


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
