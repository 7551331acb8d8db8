"""``manage.py doctor``: is everything a run needs reachable right now?

Checks the model endpoint (``GET /models`` only — never a completion), Redis,
the workers (heartbeat keys, else a Celery ping) and each enabled tool (python:
its handler is registered; HTTP: its host answers, through the SSRF guard; MCP:
its server lists it). One line per check, ``ok`` or ``FAIL reason``; exits 1 when
anything fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.core.management.base import BaseCommand

from engine.model_client import OpenAIModelClient
from reach_site.celery import app
from registry.adapters.mcp import MCPUnavailable, list_server_tools
from registry.adapters.ssrf import Guard, guarded_client
from registry.handlers import get_handler
from registry.models import Tool

WORKER_KEY_PATTERN = "reach:worker:*"


@dataclass(frozen=True)
class Check:
    """The outcome of one check."""

    label: str
    ok: bool
    detail: str

    def line(self) -> str:
        if self.ok:
            return f"{self.label}: ok" + (f" ({self.detail})" if self.detail else "")
        return f"{self.label}: FAIL {self.detail}"


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return (f"{name}: {text}" if text else name)[:limit]


def check_model(timeout_s: float) -> Check:
    """``GET /models`` on the configured endpoint (never a chat completion)."""
    base_url = settings.OPENAI_BASE_URL
    label = "model"
    if not base_url:
        return Check(
            label,
            False,
            "no endpoint configured (set OPENAI_BASE_URL, or start the local model "
            "with `make up`)",
        )
    label = f"model {base_url}"
    client = OpenAIModelClient(
        base_url=base_url,
        api_key=settings.OPENAI_API_KEY or "no-key",
        timeout_s=timeout_s,
        connect_timeout_s=min(3.0, timeout_s),
        max_retries=0,
        max_connections=1,
    )
    try:
        models = client.list_models()
    except Exception as exc:  # noqa: BLE001 - every failure is one line
        return Check(label, False, f"GET /models failed: {_short(exc)}")
    finally:
        client.close()
    wanted = settings.OPENAI_MODEL
    if wanted in models:
        return Check(label, True, f"serves {wanted}")
    listed = ", ".join(models[:5]) or "no models"
    return Check(label, True, f"{wanted} not listed; the endpoint lists {listed}")


def check_redis(timeout_s: float) -> tuple[Check, Any]:
    """PING Redis; also return the client for the worker check (or None)."""
    url = settings.REDIS_URL
    label = f"redis {_without_password(url)}"
    client = redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
    )
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001
        return Check(label, False, f"PING failed: {_short(exc)}"), None
    return Check(label, True, "PONG"), client


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


def check_workers(redis_client: Any, ping_timeout_s: float) -> Check:
    """Worker heartbeat keys (``reach:worker:<host>``), else a Celery ping."""
    label = "workers"
    if redis_client is None:
        return Check(label, False, "cannot check: Redis is unreachable")
    keys = sorted(
        k.decode() if isinstance(k, bytes) else str(k)
        for k in redis_client.scan_iter(match=WORKER_KEY_PATTERN, count=100)
    )
    if keys:
        names = ", ".join(k.removeprefix("reach:worker:") for k in keys[:5])
        return Check(label, True, f"{len(keys)} alive: {names}")
    try:
        replies = app.control.inspect(timeout=ping_timeout_s).ping() or {}
    except Exception as exc:  # noqa: BLE001
        return Check(label, False, f"no heartbeat and the ping failed: {_short(exc)}")
    if replies:
        names = ", ".join(sorted(replies)[:5])
        return Check(label, True, f"{len(replies)} answered ping: {names}")
    return Check(
        label,
        False,
        f"no worker heartbeat ({WORKER_KEY_PATTERN}) and no reply to a ping within "
        f"{ping_timeout_s:g} s — is a worker running?",
    )


def check_tools(timeout_s: float, mcp_timeout_s: float) -> Iterator[Check]:
    """One check per enabled tool."""
    listings: dict[int, Any] = {}
    tools = Tool.objects.filter(enabled=True).select_related("mcp_server")
    for tool in tools.order_by("name"):
        label = f"tool {tool.name} ({tool.kind})"
        try:
            if tool.kind == Tool.Kind.PYTHON:
                yield _check_python(label, tool)
            elif tool.kind == Tool.Kind.HTTP:
                yield _check_http(label, tool, timeout_s)
            elif tool.kind == Tool.Kind.MCP:
                yield _check_mcp(label, tool, mcp_timeout_s, listings)
            else:
                yield Check(label, False, f"unknown kind {tool.kind!r}")
        except Exception as exc:  # noqa: BLE001 - one broken tool never stops doctor
            yield Check(label, False, _short(exc))


def _check_python(label: str, tool: Tool) -> Check:
    name = tool.handler or tool.name
    if get_handler(name) is None:
        return Check(label, False, f"no python handler named {name!r} is registered")
    return Check(label, True, f"handler {name} registered")


def _check_http(label: str, tool: Tool, timeout_s: float) -> Check:
    http = tool.http or {}
    url = str(http.get("url") or "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Check(label, False, f"no http(s) URL to check ({url!r})")
    if "{" in parts.netloc:
        return Check(label, False, "the URL's host is a template; cannot check it")
    origin = f"{parts.scheme}://{parts.netloc}/"
    probe = _guarded_probe(http.get("allowed_hosts") or [], timeout_s)
    return probe(label, origin)


def _guarded_probe(
    allowed_hosts: list[Any], timeout_s: float
) -> Callable[[str, str], Check]:
    """A HEAD request through the SSRF-guarded client."""

    def probe(label: str, origin: str) -> Check:
        guard = Guard.from_entries(
            allowed_hosts, getattr(settings, "REACH_INTERNAL_HOSTS", ()) or ()
        )
        try:
            with guarded_client(guard, timeout=timeout_s) as client:
                response = client.head(origin)
        except Exception as exc:  # noqa: BLE001 - Blocked, connect errors, timeouts
            return Check(label, False, f"{origin} unreachable: {_short(exc)}")
        # Any answer means the host is reachable; the tool's path may differ.
        return Check(label, True, f"HEAD {origin} → HTTP {response.status_code}")

    return probe


def _check_mcp(
    label: str, tool: Tool, timeout_s: float, listings: dict[int, Any]
) -> Check:
    server = tool.mcp_server
    if server is None:
        return Check(label, False, "no MCP server")
    if not server.enabled:
        return Check(label, False, f"MCP server {server.name} is disabled")
    if server.pk not in listings:
        try:
            listings[server.pk] = {
                t.name for t in list_server_tools(server, timeout_s=timeout_s)
            }
        except MCPUnavailable as exc:
            listings[server.pk] = exc
    listed = listings[server.pk]
    if isinstance(listed, Exception):
        return Check(label, False, str(listed))
    remote = tool.mcp_tool or tool.name
    if remote not in listed:
        return Check(
            label, False, f"MCP server {server.name} no longer lists {remote!r}"
        )
    return Check(label, True, f"MCP server {server.name} lists {remote}")


class Command(BaseCommand):
    help = (
        "Check the model endpoint (GET /models), Redis, the workers and each "
        "enabled tool; one line each. Exits 1 when anything fails."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--timeout",
            type=float,
            default=5.0,
            help="Seconds per network check (model, Redis, HTTP tools).",
        )
        parser.add_argument(
            "--mcp-timeout",
            type=float,
            default=20.0,
            help="Seconds for an MCP server to start and list its tools.",
        )
        parser.add_argument(
            "--ping-timeout",
            type=float,
            default=1.0,
            help="Seconds to wait for workers to answer a ping (without heartbeat).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        timeout = options["timeout"]
        failed = 0

        def report(check: Check) -> None:
            nonlocal failed
            failed += 0 if check.ok else 1
            self.stdout.write(check.line())

        report(check_model(timeout))
        redis_check, redis_client = check_redis(timeout)
        report(redis_check)
        report(check_workers(redis_client, options["ping_timeout"]))
        for check in check_tools(timeout, options["mcp_timeout"]):
            report(check)
        if failed:
            self.stdout.write(f"{failed} check{'s' if failed != 1 else ''} failed.")
            sys.exit(1)
        self.stdout.write("All checks passed.")
