"""Fixtures: loopback mock servers and clients with test-sized timeouts and backoff."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rescue_env.llm import LLMClient, LLMConfig
from rescue_env.llm.mock_server import MockLLMServer


@pytest.fixture
def serve() -> Iterator[Callable[..., MockLLMServer]]:
    """Start a ``MockLLMServer(*args, **kwargs)``; every one started is stopped after the test."""
    servers: list[MockLLMServer] = []

    def start(*args: Any, **kwargs: Any) -> MockLLMServer:
        servers.append(MockLLMServer(*args, **kwargs).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def client_for() -> Callable[..., LLMClient]:
    """``client_for(server, **config_overrides)``: a client with fast backoff for tests."""

    def make(server: MockLLMServer, **overrides: Any) -> LLMClient:
        config = {"model": "mock", "timeout_s": 5.0, "backoff_initial_s": 0.01, "backoff_max_s": 0.05}
        return LLMClient(LLMConfig(base_url=server.base_url, **{**config, **overrides}))

    return make
