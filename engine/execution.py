"""Running tool handlers: timeouts that really bound the caller, retries, shaping.

A handler runs on a thread of a shared pool. The caller waits at most the tool's
timeout and then *abandons* the handler: the thread goes on until the handler
returns, but its result is discarded and the call is reported as timed out. The
number of abandoned threads still running is capped, so a tool that hangs for
ever cannot eat the pool; past the cap, further calls fail at once.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from .canonical import canonical_hash, dumps
from .json_input import text_problem
from .spec import (
    Attempt,
    CallContext,
    ErrorClass,
    Handler,
    ToolResult,
    ToolSpec,
    utcnow,
)


class ToolError(Exception):
    """A handler's way to report a failure meant for the model (no traceback)."""

    error_class: str = ErrorClass.TOOL_ERROR


class RetryableToolError(ToolError):
    """A transient failure (e.g. a 503 from an upstream service)."""

    error_class: str = ErrorClass.TRANSIENT


@dataclass(frozen=True)
class Untrusted:
    """A handler's result that taints the run whatever its tool's flag says.

    For tools whose output is trusted or not item by item: ``recall`` returns
    its items wrapped so when one of them was written by a tainted run. Such a
    result is never cached (the flag would not survive the cache).
    """

    value: Any


class ResultCache(Protocol):
    def get(self, key: str) -> Any | None: ...

    def set(self, key: str, value: Any, ttl_s: int) -> None: ...


class RateLimiter(Protocol):
    def acquire(self, tool: str, per_minute: int) -> float:
        """Return 0 when the call may go ahead, else seconds until it may."""
        ...


class NullCache:
    def get(self, key: str) -> Any | None:
        return None

    def set(self, key: str, value: Any, ttl_s: int) -> None:
        return None


class NoRateLimit:
    def acquire(self, tool: str, per_minute: int) -> float:
        return 0.0


_MISSING = object()

#: Failures worth another try (for a tool that is safe to retry).
_RETRYABLE = frozenset({ErrorClass.TIMEOUT, ErrorClass.TRANSIENT, ErrorClass.EXCEPTION})


@dataclass
class Executor:
    """Runs handlers with timeouts, retries, caching and rate limits."""

    max_threads: int = 32
    max_abandoned: int = 16
    cache: ResultCache = field(default_factory=NullCache)
    rate_limiter: RateLimiter = field(default_factory=NoRateLimit)
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.max_threads, thread_name_prefix="tool")
        self._lock = threading.Lock()
        self._abandoned = 0

    @property
    def abandoned(self) -> int:
        with self._lock:
            return self._abandoned

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def cache_key(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
        return "reach:cache:" + canonical_hash(
            {"tool": spec.name, "version": spec.version, "arguments": arguments}
        )

    def run(
        self,
        spec: ToolSpec,
        handler: Handler,
        arguments: dict[str, Any],
        context: CallContext,
    ) -> ToolResult:
        """Execute one validated call and return its shaped result or error."""
        started = utcnow()
        if spec.cacheable:
            key = self.cache_key(spec, arguments)
            cached = self.cache.get(key)
            if cached is not None:
                return ToolResult(
                    ok=True,
                    value=cached,
                    cached=True,
                    started_at=started,
                    finished_at=utcnow(),
                )
        if spec.rate_limit_per_min > 0:
            wait_s = self.rate_limiter.acquire(spec.name, spec.rate_limit_per_min)
            if wait_s > 0:
                return ToolResult(
                    ok=False,
                    error=(
                        f"Rate limit of {spec.name} reached ({spec.rate_limit_per_min}"
                        f" calls per minute). Try again in about {wait_s:.0f} s, or "
                        "continue with what you already have."
                    ),
                    error_class=ErrorClass.RATE_LIMITED,
                    started_at=started,
                    finished_at=utcnow(),
                )
        attempts: list[Attempt] = []
        tries = 1 + (spec.max_retries if spec.retry_safe else 0)
        result: ToolResult | None = None
        for number in range(1, tries + 1):
            value, attempt = self._attempt(spec, handler, arguments, context, number)
            attempts.append(attempt)
            if attempt.error is None:
                untrusted = isinstance(value, Untrusted)
                result = ToolResult(
                    ok=True,
                    value=value.value if untrusted else value,
                    attempts=attempts,
                    untrusted=untrusted,
                )
                break
            retryable = attempt.error_class in _RETRYABLE
            if number == tries or not retryable:
                result = ToolResult(
                    ok=False,
                    error=attempt.error,
                    error_class=attempt.error_class,
                    attempts=attempts,
                )
                break
            delay = min(self.backoff_cap_s, self.backoff_base_s * 2 ** (number - 1))
            self.sleep(delay * (0.5 + random.random() / 2))
        assert result is not None
        result.started_at = started
        result.finished_at = utcnow()
        if result.ok and spec.cacheable and not result.untrusted:
            self.cache.set(
                self.cache_key(spec, arguments), result.value, spec.cache_ttl_s
            )
        return result

    def _attempt(
        self,
        spec: ToolSpec,
        handler: Handler,
        arguments: dict[str, Any],
        context: CallContext,
        number: int,
    ) -> tuple[Any, Attempt]:
        started_at = utcnow().isoformat()
        t0 = time.monotonic()
        with self._lock:
            if self._abandoned >= self.max_abandoned:
                return None, Attempt(
                    number,
                    started_at,
                    0.0,
                    "Too many earlier calls are still hanging; this tool is "
                    "unavailable for now.",
                    ErrorClass.OVERLOADED,
                )
        deadline = t0 + spec.timeout_s
        ctx = CallContext(
            task_id=context.task_id,
            seq=context.seq,
            idempotency_key=context.idempotency_key,
            tool=context.tool,
            deadline=deadline,
        )
        # The caller's context goes along (the task a log line concerns).
        future: Future[Any] = self._pool.submit(
            contextvars.copy_context().run, handler, dict(arguments), ctx
        )
        try:
            value = future.result(timeout=spec.timeout_s)
        except FutureTimeout:
            self._abandon(future)
            message = f"{spec.name} did not answer within {spec.timeout_s:g} s."
            if not spec.retry_safe:
                message += " It may still take effect; check before calling it again."
            return None, Attempt(
                number,
                started_at,
                (time.monotonic() - t0) * 1000,
                message,
                ErrorClass.TIMEOUT,
            )
        except ToolError as exc:
            return None, Attempt(
                number,
                started_at,
                (time.monotonic() - t0) * 1000,
                str(exc) or exc.__class__.__name__,
                exc.error_class,
            )
        except Exception as exc:  # noqa: BLE001 - a tool never crashes the loop
            return None, Attempt(
                number,
                started_at,
                (time.monotonic() - t0) * 1000,
                f"{spec.name} failed: {exc.__class__.__name__}: {exc}"[:500],
                ErrorClass.EXCEPTION,
            )
        elapsed = (time.monotonic() - t0) * 1000
        marked = isinstance(value, Untrusted)
        try:
            value = ensure_json(value.value if marked else value)
        except ValueError as exc:
            return None, Attempt(
                number, started_at, elapsed, str(exc), ErrorClass.BAD_RESULT
            )
        return (Untrusted(value) if marked else value), Attempt(
            number, started_at, elapsed
        )

    def _abandon(self, future: Future[Any]) -> None:
        if future.cancel():
            # Still queued behind busy threads: it will never run, nothing hangs.
            return
        with self._lock:
            self._abandoned += 1

        def release(_: Future[Any]) -> None:
            with self._lock:
                self._abandoned -= 1

        future.add_done_callback(release)


def ensure_json(value: Any) -> Any:
    """Return ``value`` if it is plain JSON data, else raise ValueError."""
    _check_plain(value, 0)
    if isinstance(value, tuple):
        return list(value)
    return value


def _check_plain(value: Any, depth: int) -> None:
    if depth > 64:
        raise ValueError("The tool returned data nested too deeply.")
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, str):
        _check_text(value)
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("The tool returned a non-finite number.")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError("The tool returned an object with non-string keys.")
            _check_text(key)
            _check_plain(item, depth + 1)
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item, depth + 1)
        return
    raise ValueError(f"The tool returned a {type(value).__name__}, not JSON data.")


def _check_text(text: str) -> None:
    # What no UTF-8 encoder nor PostgreSQL stores (a lone surrogate from a
    # "\ud800" escape, a NUL) would fail the step's write, not the call.
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(f"The tool returned text that cannot be stored: {problem}.")


def select_fields(value: Any, pointers: Sequence[str]) -> Any:
    """Keep only the fields at ``pointers`` (JSON pointers); lists apply per item."""
    if not pointers:
        return value
    if isinstance(value, list):
        return [select_fields(item, pointers) for item in value]
    if not isinstance(value, Mapping):
        return value
    selected: dict[str, Any] = {}
    for pointer in pointers:
        found = resolve_pointer(value, pointer)
        if found is _MISSING:
            continue
        _assign(selected, pointer, found)
    return selected


def resolve_pointer(value: Any, pointer: str) -> Any:
    if pointer in ("", "/"):
        return value
    current = value
    for raw in pointer.lstrip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping) and token in current:
            current = current[token]
        elif (
            isinstance(current, list) and token.isdigit() and int(token) < len(current)
        ):
            current = current[int(token)]
        else:
            return _MISSING
    return current


def _assign(target: dict[str, Any], pointer: str, value: Any) -> None:
    tokens = [
        t.replace("~1", "/").replace("~0", "~") for t in pointer.strip("/").split("/")
    ]
    node = target
    for token in tokens[:-1]:
        node = node.setdefault(token, {})
    node[tokens[-1]] = value


TRUNCATION_MARKER = "…[truncated by Agent Reach: {shown} of {total} characters shown]"


def observation_text(value: Any, max_chars: int) -> str:
    """The JSON text the model sees for a result, cut to ``max_chars``."""
    text = dumps(value)
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    shown = text[:max_chars]
    return dumps(
        {
            "truncated": True,
            "partial_result": shown
            + TRUNCATION_MARKER.format(shown=max_chars, total=len(text)),
        }
    )
