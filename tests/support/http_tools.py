"""HTTP tools as the registry builds them, run once as the executor would.

``http_tool(url, ...)`` is an unsaved tool; ``call(tool, arguments)`` runs its
handler; ``FakeDNS`` answers for test names (the ``dns`` fixture installs it).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from engine.spec import CallContext
from registry.adapters.http import http_handler
from registry.models import Tool
from registry.services import spec_for


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
