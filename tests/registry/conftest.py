"""Fixtures of the HTTP-tool tests: local servers, a test resolver, tool helpers."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from engine.spec import CallContext
from registry.adapters.http import http_handler
from registry.models import Tool
from registry.services import spec_for
from tests.registry.servers import LocalServer, Responder, echo


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


class FakeDNS:
    """Answers for test names; a list answer is used once per lookup, in order."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []

    def set(self, name: str, *answers: list[str]) -> None:
        self.answers[name] = list(answers)

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        queue = self.answers.get(host)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, f"test resolver: no {host}")
        return queue.pop(0) if len(queue) > 1 else list(queue[0])


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDNS:
    """Replace the guard's resolver (the one seam) for names such as rebind.example."""
    fake = FakeDNS()
    monkeypatch.setattr("registry.adapters.ssrf.resolve", fake)
    return fake


PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "keyword": {"type": "string", "description": "Words to look for."},
        "path": {"type": "string", "description": "A file path."},
        "count": {"type": "integer", "description": "How many."},
        "tags": {"type": "array", "items": {"type": "string"}},
        "title": {"type": "string", "description": "A title."},
        "author": {"type": "string", "description": "Who wrote it."},
    },
}


def http_tool(url: str, allowed_hosts: list[str] | None = None, **options: Any) -> Tool:
    """An unsaved HTTP tool; ``options`` set ``http`` keys or Tool fields."""
    http_keys = {"method", "query", "headers", "body", "response_fields"}
    http = {
        "method": "GET",
        "url": url,
        "allowed_hosts": ["127.0.0.1"] if allowed_hosts is None else allowed_hosts,
    }
    fields: dict[str, Any] = {}
    for key, value in options.items():
        (http if key in http_keys else fields)[key] = value
    return Tool(
        name=fields.pop("name", "fetch_thing"),
        description="Fetches a thing from a test server.",
        parameters=fields.pop("parameters", PARAMETERS),
        kind=Tool.Kind.HTTP,
        http=http,
        timeout_s=fields.pop("timeout_s", 5.0),
        **fields,
    )


def call(tool: Tool, arguments: dict[str, Any], key: str = "task-1:2:0") -> Any:
    """Run the tool's handler once, as the executor would."""
    spec = spec_for(tool)
    context = CallContext(
        task_id=key.split(":", 1)[0],
        seq=3,
        idempotency_key=key,
        tool=spec,
        deadline=time.monotonic() + spec.timeout_s,
    )
    return http_handler(tool)(dict(arguments), context)
