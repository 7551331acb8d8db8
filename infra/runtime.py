"""Process-wide runtime objects: the model client, the tool executor, Redis."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from django.conf import settings
from django.db import connection

from engine.execution import Executor
from engine.model_client import ModelError, OpenAIModelClient
from engine.redaction import Redactor
from engine.spec import ErrorClass
from infra.slots import Slot

log = logging.getLogger(__name__)
_lock = threading.Lock()


@functools.cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=2,
        socket_connect_timeout=2,
        health_check_interval=30,
    )


class RedisResultCache:
    """Per-tool result cache shared by every worker."""

    def get(self, key: str) -> Any | None:
        try:
            raw = redis_client().get(key)
        except redis.RedisError:
            log.warning("result cache unavailable", exc_info=True)
            return None
        return json.loads(raw) if raw is not None else None

    def set(self, key: str, value: Any, ttl_s: int) -> None:
        try:
            redis_client().set(key, json.dumps(value, ensure_ascii=False), ex=ttl_s)
        except redis.RedisError:
            log.warning("result cache unavailable", exc_info=True)


class RedisRateLimiter:
    """Calls per minute per tool across all workers (a fixed one-minute window)."""

    def acquire(self, tool: str, per_minute: int) -> float:
        now = time.time()
        window = int(now // 60)
        key = f"reach:rate:{tool}:{window}"
        try:
            pipe = redis_client().pipeline()
            pipe.incr(key)
            pipe.expire(key, 120)
            count = int(pipe.execute()[0])
        except redis.RedisError:
            log.warning("rate limiter unavailable; allowing the call", exc_info=True)
            return 0.0
        if count <= per_minute:
            return 0.0
        return max(1.0, (window + 1) * 60 - now)


_model_client: OpenAIModelClient | None = None
_model_key: tuple[Any, ...] | None = None


def model_client() -> OpenAIModelClient:
    """The shared client for the configured endpoint (re-made if settings change)."""
    global _model_client, _model_key
    key = (
        settings.OPENAI_BASE_URL,
        settings.OPENAI_API_KEY,
        settings.REACH_MODEL_TIMEOUT_S,
        settings.REACH_MODEL_MAX_RETRIES,
        settings.REACH_MODEL_TEMPERATURE,
    )
    with _lock:
        if _model_client is None or _model_key != key:
            if not settings.OPENAI_BASE_URL:
                raise ModelError(
                    "No model endpoint is configured: set OPENAI_BASE_URL, or start "
                    "the local model with `make up`.",
                    kind=ErrorClass.CONNECTION,
                    attempts=[],
                )
            _model_client = OpenAIModelClient(
                base_url=settings.OPENAI_BASE_URL,
                api_key=settings.OPENAI_API_KEY,
                timeout_s=settings.REACH_MODEL_TIMEOUT_S,
                connect_timeout_s=settings.REACH_MODEL_CONNECT_TIMEOUT_S,
                max_retries=settings.REACH_MODEL_MAX_RETRIES,
                max_connections=max(100, settings.CELERY_WORKER_CONCURRENCY),
                temperature=settings.REACH_MODEL_TEMPERATURE,
            )
            _model_key = key
        return _model_client


@functools.cache
def executor() -> Executor:
    return Executor(
        max_threads=settings.REACH_TOOL_THREADS,
        max_abandoned=settings.REACH_MAX_ABANDONED_THREADS,
        cache=RedisResultCache(),
        rate_limiter=RedisRateLimiter(),
    )


@functools.cache
def model_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max(8, settings.CELERY_WORKER_CONCURRENCY), thread_name_prefix="model"
    )


def configured_secrets() -> dict[str, str]:
    """Secret values the redactor must know: settings, environment, the store."""
    values: dict[str, str] = {}
    key = settings.OPENAI_API_KEY
    if key and key != "local-model-no-key":
        values["OPENAI_API_KEY"] = key
    values["DJANGO_SECRET_KEY"] = settings.SECRET_KEY
    for index, key in enumerate(getattr(settings, "REACH_SECRETS_KEYS", [])):
        if key:
            values[f"REACH_SECRETS_KEY_{index}"] = key
    for name, value in os.environ.items():
        if name.startswith("REACH_SECRET_") and value:
            values[name.removeprefix("REACH_SECRET_")] = value
    values.update(_stored_secrets())
    return values


def _no_store() -> Mapping[str, str]:
    return {}


#: Where the redactor learns stored secret values (infra sits below every app).
#: Filled by ``registry`` (``RegistryConfig.ready``, registry/apps.py) with
#: ``registry.secrets.secret_values``; unfilled, no value is stored ({}).
secret_store = Slot[Callable[[], Mapping[str, str]]](
    "secret store", filled_by="registry", default=_no_store
)


def _stored_secrets() -> Mapping[str, str]:
    # Redaction runs on many threads (logging, pushes); one that had no database
    # connection before the refresh must not be left holding one.
    had_connection = connection.connection is not None
    values: dict[str, str] = {}
    try:
        values.update(secret_store()())
    except Exception:  # noqa: BLE001 - the database may not be ready yet
        return {}
    finally:
        if not had_connection:
            connection.close()
    return values


class _RefreshingRedactor(Redactor):
    """Learns new secret values from the store without a restart."""

    REFRESH_S = 5.0

    def __init__(self) -> None:
        super().__init__(secret_source=configured_secrets)
        self._refreshed = 0.0
        self._refreshing = False

    def text(self, text: str) -> str:
        now = time.monotonic()
        if (
            now - self._refreshed > self.REFRESH_S
            and not self._refreshing
            and _may_query()
        ):
            self._refreshing = True
            try:
                self._refreshed = now
                self.refresh()
            finally:
                self._refreshing = False
        return super().text(text)


def _may_query() -> bool:
    """Refresh only outside transactions and event loops (never break either)."""
    try:
        asyncio.get_running_loop()
        return False
    except RuntimeError:
        pass
    return not connection.in_atomic_block


@functools.cache
def redactor() -> Redactor:
    return _RefreshingRedactor()
