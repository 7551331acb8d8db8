"""What a scripted model says: the one vocabulary of every test model.

Builders (``text``, ``tool_call``, ``tool_calls``, ``error``, ``delay``, ``hang``)
make replies; a ``Script`` plays them in order (``calls_then_answers`` builds the
common one: runs that each call one tool, then answer). Both test models speak
it: the OpenAI-compatible HTTP server (``tests.support.scripted_model``) and the
in-process ``FakeModel`` of the Django-free engine tests
(``tests.support.engine_doubles``). Standard library only: no Django here.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "EXHAUSTED_TEXT",
    "AnyReply",
    "ErrorReply",
    "Handler",
    "RecordingHandler",
    "Reply",
    "Script",
    "ScriptStep",
    "ToolCall",
    "broken_stream",
    "calls_then_answers",
    "delay",
    "error",
    "hang",
    "slow_stream",
    "text",
    "tool_call",
    "tool_calls",
    "with_usage",
    "without_usage",
]

EXHAUSTED_TEXT = "(script exhausted)"


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asks for.

    ``arguments`` is sent exactly as given (it is the JSON text the API carries);
    ``call_id`` ``None`` lets the model that answers make the id.
    """

    name: str
    arguments: str
    call_id: str | None = None


@dataclass(frozen=True)
class Reply:
    """A successful completion: text, tool calls, or both.

    ``delay_s`` sleeps before answering; ``hang`` never answers (the request
    waits until the server stops, then the connection is dropped).
    """

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    delay_s: float = 0.0
    hang: bool = False
    #: The ``usage`` object sent as it is (None: none at all, as some servers
    #: do); left at ``"counted"``: the counts the test model makes up.
    usage: Mapping[str, Any] | None | str = "counted"
    #: Streamed (``stream=True``): a sleep before each chunk, and the chunk
    #: count after which the connection drops mid-reply (None: it never does).
    chunk_delay_s: float = 0.0
    break_after: int | None = None

    @property
    def finish_reason(self) -> str:
        """``"tool_calls"`` when the reply calls tools, else ``"stop"``."""
        return "tool_calls" if self.tool_calls else "stop"

    def message(self, call_id: Callable[[int, ToolCall], str]) -> dict[str, Any]:
        """The assistant message the API carries; ``call_id(index, call)`` names
        the calls that have no ``call_id`` of their own."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id or call_id(index, call),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for index, call in enumerate(self.tool_calls)
            ]
        return message


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with an OpenAI-style body ``{"error": {...}}``."""

    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    param: str | None = None
    retry_after: float | None = None
    delay_s: float = 0.0


AnyReply: TypeAlias = Reply | ErrorReply
Handler: TypeAlias = Callable[[dict[str, Any]], AnyReply]
ScriptStep: TypeAlias = Reply | ErrorReply | Callable[[dict[str, Any]], AnyReply]

_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    409: ("invalid_request_error", None),
    422: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


def text(content: str) -> Reply:
    """A plain text answer (``finish_reason: "stop"``)."""
    return Reply(content=content)


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(dict(arguments), ensure_ascii=False)


def tool_call(
    name: str, arguments: Mapping[str, Any] | str, call_id: str | None = None
) -> Reply:
    """A reply calling one tool.

    A mapping is JSON-encoded (``ensure_ascii=False``); a string is sent raw, so
    malformed JSON can be tested.
    """
    return Reply(tool_calls=(ToolCall(name, _arguments_text(arguments), call_id),))


def tool_calls(
    calls: Iterable[
        tuple[str, Mapping[str, Any] | str]
        | tuple[str, Mapping[str, Any] | str, str | None]
    ],
) -> Reply:
    """A reply calling several tools at once: ``[(name, args[, call_id]), ...]``."""
    made: list[ToolCall] = []
    for call in calls:
        name, arguments = call[0], call[1]
        call_id = call[2] if len(call) > 2 else None
        made.append(ToolCall(name, _arguments_text(arguments), call_id))
    return Reply(tool_calls=tuple(made))


def error(
    status: int,
    message: str,
    *,
    retry_after: float | None = None,
    type: str | None = None,
    code: str | None = None,
) -> ErrorReply:
    """An HTTP error reply; ``retry_after`` adds a ``retry-after`` header.

    ``type``/``code`` default to what OpenAI sends for that status (``429`` →
    ``requests``/``rate_limit_exceeded``, ``5xx`` → ``server_error``, ...).
    """
    default_type, default_code = _ERROR_KINDS.get(status, ("server_error", None))
    return ErrorReply(
        status=status,
        message=message,
        type=type or default_type,
        code=code if code is not None else default_code,
        retry_after=retry_after,
    )


def without_usage(reply: Reply) -> Reply:
    """``reply`` sent with no ``usage`` at all (servers that report none)."""
    return dataclasses.replace(reply, usage=None)


def with_usage(reply: Reply, usage: Mapping[str, Any]) -> Reply:
    """``reply`` sent with exactly this ``usage`` object (e.g. with
    ``prompt_tokens_details.cached_tokens``)."""
    return dataclasses.replace(reply, usage=dict(usage))


def delay(seconds: float, reply: AnyReply) -> AnyReply:
    """``reply``, answered after sleeping ``seconds`` more (other requests go on)."""
    return dataclasses.replace(reply, delay_s=reply.delay_s + seconds)


def slow_stream(reply: Reply, per_chunk_s: float) -> Reply:
    """``reply``, streamed with a sleep of ``per_chunk_s`` before each chunk."""
    return dataclasses.replace(reply, chunk_delay_s=per_chunk_s)


def broken_stream(reply: Reply, after_chunks: int) -> Reply:
    """``reply``, its stream broken off (the connection dropped, the chunked
    body unfinished) after ``after_chunks`` chunks."""
    return dataclasses.replace(reply, break_after=after_chunks)


def hang() -> Reply:
    """A reply that never comes: the request waits until the server stops."""
    return Reply(hang=True)


# Handlers ---------------------------------------------------------------------


class RecordingHandler:
    """Base for handlers that keep every request they answered in ``requests``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> AnyReply:
        with self._lock:
            self.requests.append(request)
        return self.respond(request)

    def respond(self, request: dict[str, Any]) -> AnyReply:
        """The answer to ``request`` (subclasses implement this)."""
        raise NotImplementedError


class Script(RecordingHandler):
    """Answers with ``replies`` in order, then ``text("(script exhausted)")``.

    Each step is a reply or a ``callable(request) -> reply`` (the request is the
    chat-completions body: ``model``, ``messages``, ``tools``...). Thread-safe:
    each request takes the next step exactly once.
    """

    def __init__(self, replies: Iterable[ScriptStep]) -> None:
        super().__init__()
        self._steps: list[ScriptStep] = list(replies)
        self._next = 0

    def __call__(self, request: dict[str, Any]) -> AnyReply:
        with self._lock:  # record and take the step together: requests[i] ↔ step i
            self.requests.append(request)
            step = self._take()
        return self._resolve(step, request)

    def respond(self, request: dict[str, Any]) -> AnyReply:
        with self._lock:
            step = self._take()
        return self._resolve(step, request)

    def _take(self) -> ScriptStep | None:
        if self._next >= len(self._steps):
            return None
        step = self._steps[self._next]
        self._next += 1
        return step

    @staticmethod
    def _resolve(step: ScriptStep | None, request: dict[str, Any]) -> AnyReply:
        if step is None:
            return text(EXHAUSTED_TEXT)
        if isinstance(step, Reply | ErrorReply):
            return step
        return step(request)

    @property
    def remaining(self) -> int:
        """How many scripted steps have not been used yet."""
        with self._lock:
            return len(self._steps) - self._next

    @property
    def exhausted(self) -> bool:
        """Whether every scripted step was used."""
        return self.remaining == 0


def calls_then_answers(*runs: tuple[str, Mapping[str, Any] | str, str]) -> Script:
    """A script for runs that each call one tool, then answer: ``(name,
    arguments, answer)`` a run, in the order the runs come."""
    return Script(
        reply
        for name, arguments, answer in runs
        for reply in (tool_call(name, arguments), text(answer))
    )
