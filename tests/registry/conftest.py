"""Fixtures of the registry tests: a test resolver, MCP sessions (``local_server``
is the root conftest's, from ``tests.support.http_servers``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.http_tools import FakeDNS


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDNS:
    """Replace the guard's resolver (the one seam) for names such as rebind.example."""
    fake = FakeDNS()
    monkeypatch.setattr("registry.adapters.ssrf.resolve", fake)
    return fake


@pytest.fixture(autouse=True)
def fresh_mcp_sessions() -> Iterator[None]:
    """Each test starts its own MCP server sessions (and ends them)."""
    from registry.adapters import mcp

    mcp.close_sessions()
    yield
    mcp.close_sessions()
