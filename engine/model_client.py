"""The model client: any OpenAI-compatible chat-completions endpoint.

One small interface (:class:`ModelClient`) with one real implementation over the
official ``openai`` SDK. Every call has explicit timeouts; 429, 5xx, timeouts and
connection failures are retried here with exponential backoff and jitter, each try
recorded as an attempt, so the SDK's own retries are off.

Every call streams (``stream=True`` with ``stream_options.include_usage``): the
chunks are assembled into the very :class:`ModelReply` the non-streaming call
returned, which is what the engine records, once the call ends. While it runs,
the pieces go to the :class:`ReplyStream` the caller set in :data:`reply_stream`
(a context variable, so :class:`ModelClient` keeps its one method), which can also
cut the call short. A stream that breaks off mid-reply is retried like any failed
call; the stream's watcher is told to start over.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2

from .spec import Attempt, ErrorClass, ToolCall, Usage, utcnow

#: A chat-completions request's ``messages`` and ``tools``, as the API takes them.
Messages = Sequence[dict[str, Any]]
Tools = Sequence[dict[str, Any]]


class ModelError(Exception):
    """The model endpoint failed for good; the message is for the user.

    ``partial``: the reply written before the call was cut (a re-run's recorded
    cut reply); the engine records it as cut, as it does the live one."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        attempts: list[Attempt],
        partial: ModelReply | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts
        self.partial = partial


@dataclass
class ModelReply:
    """One chat-completions answer, as the engine records it."""

    message: dict[str, Any]
    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage
    request_id: str | None
    model: str
    latency_ms: float
    attempts: list[Attempt] = field(default_factory=list)
    #: False when the endpoint sent no usage (or only zeros): ``usage`` then
    #: says nothing, and the engine records an estimate instead.
    usage_reported: bool = True


class ModelClient(Protocol):
    def complete(
        self, *, messages: Messages, tools: Tools, model: str
    ) -> ModelReply: ...


@dataclass(frozen=True)
class ReplyDelta:
    """What one streamed chunk added to the reply being written."""

    #: The content the chunk added ("" when it only began a tool call).
    text: str
    #: The names of the tool calls begun so far, in the model's order (their
    #: arguments are not shown until the reply is complete).
    tools: tuple[str, ...] = ()
    #: The attempt this belongs to; ``reset`` drops what earlier ones showed.
    attempt: int = 1
    reset: bool = False


class ReplyWatcher(Protocol):
    """Who hears a reply as it is written (the worker's push to its watchers)."""

    def delta(self, delta: ReplyDelta) -> None:
        """A piece of the reply: called on the thread that reads the stream."""

    def ended(self) -> None:
        """The call is over (answered, failed or cut): nothing more comes."""


class ReplyStream:
    """The live side of one model call: its pieces to ``watcher`` as they come,
    and :meth:`cut`, which closes the stream at once from another thread and
    returns what was written so far."""

    def __init__(self, watcher: ReplyWatcher | None = None) -> None:
        self.watcher = watcher
        self._lock = threading.Lock()
        self._response: Any = None
        self._assembly: _Assembly | None = None
        self._shown = False
        self._cut = False
        self._ended = False

    @property
    def is_cut(self) -> bool:
        return self._cut

    def begin(self, attempt: int, response: Any, assembly: _Assembly) -> None:
        """An attempt's stream opened; a retry tells the watcher to start over."""
        with self._lock:
            self._response, self._assembly = response, assembly
            cut, shown = self._cut, self._shown
            self._shown = False
        if cut:
            with contextlib.suppress(Exception):
                response.close()
        elif shown and self.watcher is not None:
            self.watcher.delta(ReplyDelta("", (), attempt, reset=True))

    def emit(self, delta: ReplyDelta) -> None:
        if self._cut or self.watcher is None:
            return
        self._shown = True
        self.watcher.delta(delta)

    def cut(self) -> ModelReply | None:
        """Close the stream now; the reply so far (None if nothing came)."""
        with self._lock:
            self._cut = True
            response, assembly = self._response, self._assembly
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()
        self.end()
        return assembly.partial() if assembly is not None else None

    def end(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        if self.watcher is not None:
            self.watcher.ended()


#: The stream of the model call the current context makes (None: nobody
#: watches). The engine sets it around each call; the model thread it submits
#: the call to inherits it with the context.
reply_stream: contextvars.ContextVar[ReplyStream | None] = contextvars.ContextVar(
    "reply_stream", default=None
)


class _BrokenStream(Exception):
    """The stream ended before the reply did (no ``finish_reason``)."""


class _NoChoices(Exception):
    """The stream carried no choice at all."""


class _Assembly:
    """A streamed reply put together chunk by chunk, exactly as the
    non-streaming call returns it."""

    def __init__(self, model: str, request_id: str | None, t_start: float) -> None:
        self.model = model
        self.request_id = request_id
        self.t_start = t_start
        self.completion_id: str | None = None
        self.content: list[str] = []
        self.saw_content = False
        self.saw_choice = False
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self._new_name = False

    def add(self, chunk: dict[str, Any], attempt: int) -> ReplyDelta | None:
        """Take one chunk (its JSON, as the API sends it) in; what it showed
        that is new, if anything."""
        if not isinstance(chunk, dict):
            return None  # Not a chunk at all: the stream's end says what is missing.
        self.completion_id = self.completion_id or chunk.get("id")
        if chunk.get("model"):
            self.model = chunk["model"]
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        piece = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index"):
                continue
            self.saw_choice = True
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content is not None:
                self.saw_content = True
                piece += content
                self.content.append(content)
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        if not piece and not self._new_name:
            return None
        self._new_name = False
        names = tuple(c["name"] for _, c in sorted(self.calls.items()) if c["name"])
        return ReplyDelta(piece, names, attempt)

    def _add_call(self, call: dict[str, Any]) -> None:
        entry = self.calls.setdefault(
            call.get("index") or 0, {"id": None, "name": "", "arguments": []}
        )
        if call.get("id"):
            entry["id"] = call["id"]
        function = call.get("function") or {}
        if function.get("name"):
            entry["name"] += function["name"]
            self._new_name = True
        if function.get("arguments"):
            entry["arguments"].append(function["arguments"])

    def raw_message(self) -> dict[str, Any]:
        """The assistant message as the non-streaming call's ``model_dump``."""
        text = "".join(self.content)
        raw: dict[str, Any] = {"role": "assistant"}
        if self.saw_content:
            raw["content"] = text
        if self.calls:
            raw["tool_calls"] = [
                {
                    "id": entry["id"],
                    "type": "function",
                    "function": {
                        "name": entry["name"],
                        "arguments": "".join(entry["arguments"]),
                    },
                }
                for _, entry in sorted(self.calls.items())
            ]
        return raw

    def reply(self, attempts: list[Attempt]) -> ModelReply:
        content, calls = parse_message(self.raw_message())
        usage = Usage.from_dict(self.usage)
        return ModelReply(
            message=assistant_message(content, calls),
            content=content,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=usage,
            request_id=self.request_id
            or self.completion_id
            or f"local-{uuid.uuid4().hex[:12]}",
            model=self.model,
            latency_ms=(time.monotonic() - self.t_start) * 1000,
            attempts=attempts,
            # A real request always has prompt tokens: all zeros is no report.
            usage_reported=bool(usage.prompt_tokens or usage.completion_tokens),
        )

    def partial(self) -> ModelReply:
        """The text written before a cut; tool calls not (they never complete)."""
        text = "".join(self.content)
        return ModelReply(
            message=assistant_message(text, []),
            content=text,
            tool_calls=[],
            finish_reason=None,
            usage=Usage(),
            request_id=self.request_id or self.completion_id,
            model=self.model,
            latency_ms=(time.monotonic() - self.t_start) * 1000,
            usage_reported=False,
        )


def parse_message(message: dict[str, Any]) -> tuple[str | None, list[ToolCall]]:
    """Content and tool calls of an assistant message (as the API returns it)."""
    content = message.get("content")
    calls: list[ToolCall] = []
    for index, raw in enumerate(message.get("tool_calls") or []):
        function = raw.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            ToolCall(
                call_id=str(raw.get("id") or f"call_{index}"),
                name=str(function.get("name") or ""),
                raw_arguments=arguments,
                index=index,
            )
        )
    return content, calls


def assistant_message(content: str | None, calls: list[ToolCall]) -> dict[str, Any]:
    """The assistant message, as it is sent back to the model on later turns."""
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.raw_arguments},
            }
            for call in calls
        ]
    return out


class OpenAIModelClient:
    """:class:`ModelClient` over the ``openai`` SDK."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 3,
        max_connections: int = 100,
        temperature: float | None = 0.0,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # openai takes ~1.4 s to import; only a process that builds a client pays
        # for it (every Django process imports this module).
        import openai
        from openai.types.chat import ChatCompletion

        self._openai = openai
        self._completion = ChatCompletion
        # Chunks as plain JSON (``Stream[object]``): the SDK's model of each
        # chunk costs ~700 function calls, a dozen a reply, and the assembly
        # reads a few keys.
        self._stream_cls = _kept_alive(openai.Stream[object])
        self.base_url = base_url
        self.max_retries = max_retries
        self.temperature = temperature
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.sleep = sleep
        timeout = httpx2.Timeout(timeout_s, connect=connect_timeout_s)
        # Size the pool to the worker's concurrency: the default queues past 100.
        http_client = openai.DefaultHttpx2Client(
            timeout=timeout,
            limits=httpx2.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
            ),
            trust_env=False,
        )
        try:
            self._client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key,
                timeout=timeout,
                max_retries=0,
                http_client=http_client,
            )
        except (httpx2.InvalidURL, ValueError) as exc:
            # A URL the SDK cannot even parse reaches no server: the same fault,
            # for the user, as an endpoint that refuses connections.
            http_client.close()
            message = f"The model endpoint {base_url!r} is not a valid URL ({exc})."
            raise ModelError(
                _actionable(ErrorClass.CONNECTION, message, "", base_url),
                kind=ErrorClass.CONNECTION,
                attempts=[],
            ) from exc

    def close(self) -> None:
        self._client.close()

    def list_models(self) -> list[str]:
        """``GET /models``: the health check that never asks the model anything."""
        return [m.id for m in self._client.models.list()]

    def complete(
        self,
        *,
        messages: Messages,
        tools: Tools,
        model: str,
        response_format: Mapping[str, Any] | None = None,
    ) -> ModelReply:
        """One chat completion, retried as configured. ``response_format`` (not
        part of :class:`ModelClient`: the run's loop never sends one) asks for
        JSON, e.g. ``{"type": "json_schema", "json_schema": {...}}``; the built-in
        model follows it under a grammar, other servers as far as they can."""
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if response_format is not None:
            kwargs["response_format"] = dict(response_format)
        if tools:
            kwargs["tools"] = list(tools)
            # Some servers drop tools unless tool_choice is explicit
            # (docs/stack-notes.md trap 10).
            kwargs["tool_choice"] = "auto"
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        stream = reply_stream.get()
        try:
            return self._complete(kwargs, model, stream)
        finally:
            if stream is not None:
                stream.end()

    def _complete(
        self, kwargs: dict[str, Any], model: str, stream: ReplyStream | None
    ) -> ModelReply:
        attempts: list[Attempt] = []
        t_start = time.monotonic()
        for number in range(1, self.max_retries + 2):
            started_at = utcnow().isoformat()
            t0 = time.monotonic()
            retry_after: float | None = None
            try:
                assembly = self._read(kwargs, model, t_start, number, stream)
            except Exception as exc:
                if stream is not None and stream.is_cut:
                    raise ModelError(
                        "The call was cut short.",
                        kind=ErrorClass.CANCELLED,
                        attempts=attempts,
                    ) from exc
                kind, message, retryable, retry_after = self._failure(exc)
            else:
                elapsed = (time.monotonic() - t0) * 1000
                attempts.append(Attempt(number, started_at, elapsed))
                return assembly.reply(attempts)
            attempts.append(
                Attempt(
                    number, started_at, (time.monotonic() - t0) * 1000, message, kind
                )
            )
            if not retryable or number > self.max_retries:
                raise ModelError(
                    _actionable(kind, message, model, self.base_url),
                    kind=kind,
                    attempts=attempts,
                )
            delay = min(self.backoff_cap_s, self.backoff_base_s * 2 ** (number - 1))
            delay *= 0.5 + random.random() / 2
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.backoff_cap_s))
            self.sleep(delay)
        raise AssertionError("unreachable")

    def _read(
        self,
        kwargs: dict[str, Any],
        model: str,
        t_start: float,
        attempt: int,
        stream: ReplyStream | None,
    ) -> _Assembly:
        """One attempt: open the stream and assemble the reply from its chunks."""
        # The documented raw request (the SDK's README, "undocumented requests"):
        # ``chat.completions.create`` walks the whole request through its type
        # transform first, ~2.5 ms of CPU for a dozen messages and a few tool
        # schemas, where the body here is already plain JSON. Errors, auth and
        # the parsed chunks are the same.
        chunks = self._client.post(
            "/chat/completions",
            body=kwargs,
            cast_to=self._completion,
            options={"security": {"bearer_auth": True}},
            stream=True,
            stream_cls=self._stream_cls,
        )
        with contextlib.closing(chunks):
            assembly = _Assembly(
                model, chunks.response.headers.get("x-request-id"), t_start
            )
            if stream is not None:
                stream.begin(attempt, chunks.response, assembly)
            for chunk in chunks:
                delta = assembly.add(chunk, attempt)
                if delta is not None and stream is not None:
                    stream.emit(delta)
        if stream is not None and stream.is_cut:
            raise _BrokenStream("cut")
        if assembly.completion_id is not None and not assembly.saw_choice:
            raise _NoChoices()
        if assembly.finish_reason is None:
            raise _BrokenStream("The stream ended before the reply did.")
        return assembly

    def _failure(self, exc: Exception) -> tuple[str, str, bool, float | None]:
        """What a failed attempt was: its class, message, whether to retry, and
        how long the server asked to wait; an unknown failure is raised."""
        openai = self._openai
        if isinstance(exc, _NoChoices):
            return (
                ErrorClass.BAD_RESPONSE,
                "The model server returned no choices.",
                False,
                None,
            )
        if isinstance(exc, _BrokenStream):
            return (
                ErrorClass.CONNECTION,
                "The model server's stream broke off before the reply ended.",
                True,
                None,
            )
        if isinstance(exc, openai.APITimeoutError):
            return ErrorClass.TIMEOUT, "The model did not answer in time.", True, None
        if isinstance(exc, openai.APIConnectionError):
            return (
                ErrorClass.CONNECTION,
                f"Cannot reach the model server at {self.base_url}: the "
                f"endpoint is unreachable ({_root_cause(exc)}).",
                True,
                None,
            )
        if isinstance(exc, openai.RateLimitError):
            return (
                ErrorClass.RATE_LIMITED,
                "The model server is rate limiting requests (429).",
                True,
                _retry_after(exc),
            )
        if isinstance(exc, openai.APIStatusError):
            retryable = exc.status_code >= 500
            return (
                ErrorClass.SERVER if retryable else ErrorClass.BAD_REQUEST,
                f"The model server answered {exc.status_code}: "
                f"{_short(str(exc.message))}",
                retryable,
                None,
            )
        if isinstance(exc, openai.APIError):
            # An error event inside the stream, after a 200.
            return (
                ErrorClass.SERVER,
                f"The model server failed mid-reply: {_short(str(exc.message))}",
                True,
                None,
            )
        raise exc


def _kept_alive(stream: Any) -> Any:
    """The SDK's ``Stream``, reading its body to the end after ``[DONE]``.

    The SDK stops at ``[DONE]`` and closes the response before the chunked
    body's last bytes are read, which closes the connection too: every model
    call would open a new one (a TLS handshake, against a remote endpoint). A
    server ends its body right after ``[DONE]``, so reading on costs nothing.
    """

    class KeptAlive(stream):  # type: ignore[misc]
        def _iter_events(self) -> Any:
            events = super()._iter_events()
            for sse in events:
                if sse.data.startswith("[DONE]"):
                    for _rest in events:
                        pass
                yield sse

    return KeptAlive


class UnavailableModel:
    """:class:`ModelClient` for an endpoint that cannot be used at all (none is
    configured, or its URL does not parse): every call fails with ``error``.

    The run then ends as any run whose model is down does, with a failed
    ``model_call`` step and ``model_error``, instead of failing before its loop.
    """

    def __init__(self, error: ModelError) -> None:
        self.error = error

    def complete(self, *, messages: Messages, tools: Tools, model: str) -> ModelReply:
        message, kind = str(self.error), self.error.kind
        raise ModelError(
            message,
            kind=kind,
            attempts=[Attempt(1, utcnow().isoformat(), 0.0, message, kind)],
        )


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a connection failure ("[Errno 111] Connection
    refused"), not the SDK's generic "Connection error." wrapped around it."""
    seen: set[int] = set()
    inner = exc
    while id(inner) not in seen:
        seen.add(id(inner))
        nxt = inner.__cause__ or inner.__context__
        if nxt is None:
            break
        inner = nxt
    return _short(str(inner).rstrip(".") or inner.__class__.__name__, 200)


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError):
        return None


def _short(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, at a space when there is one.

    Server error bodies can echo a key; cutting inside it would leave a prefix
    the redactor no longer recognises, so whole words are kept or dropped.
    """
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else "") + "…"


def _actionable(kind: str, message: str, model: str, base_url: str) -> str:
    hints: dict[str, str] = {
        ErrorClass.CONNECTION: "Check that the model server is running and that "
        "OPENAI_BASE_URL points at it.",
        ErrorClass.TIMEOUT: "The server may be overloaded; try again, or raise "
        "REACH_MODEL_TIMEOUT_S.",
        ErrorClass.RATE_LIMITED: "Wait a minute and try again, or raise the "
        "endpoint's quota.",
        ErrorClass.SERVER: "The model server failed; check its logs and try again.",
        ErrorClass.BAD_REQUEST: f"Check that the model '{model}' exists on "
        f"{base_url} and that OPENAI_API_KEY is right.",
    }
    return f"{message} {hints.get(kind, '')}".strip()
