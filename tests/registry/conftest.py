"""Fixtures of the registry tests: local servers, a test resolver, MCP sessions."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator

import pytest

from tests.support.http_servers import LocalServer, Responder, echo
from tests.support.http_tools import FakeDNS


@pytest.fixture
def local_server() -> Iterator[Callable[..., LocalServer]]:
    """``local_server(respond, host, port, tls)`` -> a started server."""
    servers: list[LocalServer] = []

    def start(
        respond: Responder = echo,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> LocalServer:
        server = LocalServer(respond, host=host, port=port, tls=tls).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


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
