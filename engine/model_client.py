"""The model client: any OpenAI-compatible chat-completions endpoint.

One small interface (:class:`ModelClient`) with one real implementation over the
official ``openai`` SDK. Every call has explicit timeouts; 429, 5xx, timeouts and
connection failures are retried here with exponential backoff and jitter, each try
recorded as an attempt, so the SDK's own retries are off.
"""

from __future__ import annotations

import json
import random
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
    """The model endpoint failed for good; the message is for the user."""

    def __init__(self, message: str, *, kind: str, attempts: list[Attempt]) -> None:
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts


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
        openai = self._openai
        kwargs: dict[str, Any] = {"model": model, "messages": list(messages)}
        if response_format is not None:
            kwargs["response_format"] = dict(response_format)
        if tools:
            kwargs["tools"] = list(tools)
            # Some servers drop tools unless tool_choice is explicit
            # (docs/stack-notes.md trap 10).
            kwargs["tool_choice"] = "auto"
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        attempts: list[Attempt] = []
        t_start = time.monotonic()
        for number in range(1, self.max_retries + 2):
            started_at = utcnow().isoformat()
            t0 = time.monotonic()
            retry_after: float | None = None
            try:
                # The documented raw request (the SDK's README, "undocumented
                # requests"): ``chat.completions.create`` walks the whole request
                # through its type transform first, ~2.5 ms of CPU for a dozen
                # messages and a few tool schemas, where the body here is already
                # plain JSON. Errors, auth and the parsed ChatCompletion are the same.
                completion = self._client.post(
                    "/chat/completions",
                    body=kwargs,
                    cast_to=self._completion,
                    options={"security": {"bearer_auth": True}},
                )
            except openai.APITimeoutError:
                kind, message, retryable = (
                    ErrorClass.TIMEOUT,
                    "The model did not answer in time.",
                    True,
                )
            except openai.APIConnectionError as exc:
                kind, message, retryable = (
                    ErrorClass.CONNECTION,
                    f"Cannot reach the model server at {self.base_url}: the "
                    f"endpoint is unreachable ({_root_cause(exc)}).",
                    True,
                )
            except openai.RateLimitError as exc:
                kind, message, retryable = (
                    ErrorClass.RATE_LIMITED,
                    "The model server is rate limiting requests (429).",
                    True,
                )
                retry_after = _retry_after(exc)
            except openai.APIStatusError as exc:
                retryable = exc.status_code >= 500
                kind = ErrorClass.SERVER if retryable else ErrorClass.BAD_REQUEST
                message = (
                    f"The model server answered {exc.status_code}: "
                    f"{_short(str(exc.message))}"
                )
            else:
                elapsed = (time.monotonic() - t0) * 1000
                attempts.append(Attempt(number, started_at, elapsed))
                return self._reply(completion, model, t_start, attempts)
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

    def _reply(
        self, completion: Any, model: str, t_start: float, attempts: list[Attempt]
    ) -> ModelReply:
        if not completion.choices:
            raise ModelError(
                "The model server returned no choices.",
                kind=ErrorClass.BAD_RESPONSE,
                attempts=attempts,
            )
        choice = completion.choices[0]
        raw = choice.message.model_dump(exclude_none=True)
        content, calls = parse_message(raw)
        message = assistant_message(content, calls)
        usage = Usage.from_dict(
            completion.usage.model_dump() if completion.usage is not None else None
        )
        # A real request always has prompt tokens: all zeros is no report.
        reported = bool(usage.prompt_tokens or usage.completion_tokens)
        request_id = getattr(completion, "_request_id", None) or completion.id
        return ModelReply(
            message=message,
            content=content,
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            usage=usage,
            request_id=request_id or f"local-{uuid.uuid4().hex[:12]}",
            model=completion.model or model,
            latency_ms=(time.monotonic() - t_start) * 1000,
            attempts=attempts,
            usage_reported=reported,
        )


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
