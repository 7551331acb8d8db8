"""Server-Sent Events as a client reads them, in-process or over real HTTP.

``SseParser`` follows the HTML standard's event-stream parsing (fields, comments,
blank line dispatch). ``AsgiStream`` sends one GET through the product's ASGI
application, as the web server does, and reads the body as it streams, so a test can
disconnect mid-stream the way a client does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from asgiref.testing import ApplicationCommunicator

from infra.runtime import redis_client
from reach_site.asgi import application


@dataclass(frozen=True)
class SseEvent:
    id: str | None
    event: str
    data: Any

    @property
    def rev(self) -> int:
        assert self.id is not None, self
        return int(self.id)


@dataclass
class SseParser:
    """Feed text (any chunking); get the complete events. Comments are kept."""

    comments: list[str] = field(default_factory=list)
    _buffer: str = ""
    _id: str | None = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, text: str) -> list[SseEvent]:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        return self.lines(line.removesuffix("\r") for line in lines)

    def lines(self, lines: Iterable[str]) -> list[SseEvent]:
        events = []
        for line in lines:
            event = self.line(line)
            if event is not None:
                events.append(event)
        return events

    def line(self, line: str) -> SseEvent | None:
        if line == "":
            if not self._data:
                self._id, self._event = None, ""
                return None
            event = SseEvent(
                self._id, self._event or "message", json.loads("\n".join(self._data))
            )
            self._id, self._event, self._data = None, "", []
            return event
        if line.startswith(":"):
            self.comments.append(line[1:].strip())
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        return None


def events_path(task_id: Any, after: int | None = None) -> str:
    query = "" if after is None else f"?after={after}"
    return f"/api/tasks/{task_id}/events/{query}"


def subscribers(group: str) -> int:
    """How many processes' channel layers listen to ``group`` (Redis pub/sub)."""
    ((_, count),) = redis_client().pubsub_numsub(f"reach__group__{group}")
    return int(count)


class AsgiStream:
    """``GET path`` through ``reach_site.asgi.application``, read as it streams."""

    def __init__(self, path: str, headers: dict[str, str] | None = None) -> None:
        raw = [(b"host", b"127.0.0.1")]
        raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        route, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": route,
            "raw_path": route.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": raw,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        self.comm = ApplicationCommunicator(application, scope)
        self.parser = SseParser()
        self.pending: list[SseEvent] = []
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.ended = False

    async def open(self, timeout: float = 10) -> int:
        """Send the request; return the status once the headers arrive."""
        await self.comm.send_input({"type": "http.request", "body": b""})
        start = await self.comm.receive_output(timeout)
        assert start["type"] == "http.response.start", start
        self.status = start["status"]
        self.headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
        return self.status

    async def _chunk(self, timeout: float) -> None:
        message = await self.comm.receive_output(timeout)
        assert message["type"] == "http.response.body", message
        self.body += message.get("body", b"")
        self.pending += self.parser.feed(message.get("body", b"").decode())
        if not message.get("more_body", False):
            self.ended = True

    async def events(self, count: int, timeout: float = 10) -> list[SseEvent]:
        """The next ``count`` events (fewer only if the stream ends first)."""
        while len(self.pending) < count and not self.ended:
            await self._chunk(timeout)
        taken, self.pending = self.pending[:count], self.pending[count:]
        return taken

    async def to_the_end(self, timeout: float = 10) -> list[SseEvent]:
        """Every event until the server ends the stream."""
        while not self.ended:
            await self._chunk(timeout)
        taken, self.pending = self.pending, []
        await self.comm.wait(timeout)
        return taken

    async def comment(self, timeout: float = 10) -> str:
        """Wait for the next comment line (``: keep-alive``)."""
        seen = len(self.parser.comments)
        while len(self.parser.comments) == seen and not self.ended:
            await self._chunk(timeout)
        return self.parser.comments[seen]

    async def disconnect(self, timeout: float = 10) -> None:
        """Hang up, as a client closing its connection does; wait for the app."""
        await self.comm.send_input({"type": "http.disconnect"})
        await self.comm.wait(timeout)
