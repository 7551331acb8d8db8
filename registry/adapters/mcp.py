"""MCP tools: list a server's tools and call them from the engine.

Talks to MCP servers (a stdio command, or a streamable HTTP URL) with the official
``mcp`` SDK. The SDK is async; the engine calls handlers on pool threads. One
asyncio loop on a daemon thread per process owns every MCP connection: calls are
submitted to it and waited for with a deadline, so a handler thread never runs an
event loop of its own and a stdio server is started once per worker, not per call.

A pooled session that breaks (the server exited, the connection dropped) is
discarded and the next call opens a new one. Listing (the import,
:mod:`registry.mcp_import`; ``doctor``) always opens a fresh connection, so it
reports the server as it is now.

Calls go through the engine like every other tool: validation, policy, approval,
trace and redaction happen there; the handler here only speaks MCP.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio
import httpx2
from django.conf import settings

from engine.execution import RetryableToolError, ToolError
from engine.json_input import loads_strict
from engine.spec import CallContext, ErrorClass, Handler, Risk
from registry.models import MCPServer, Tool
from registry.secrets import secret_value

if TYPE_CHECKING:
    # Type-only: the SDK takes ~1.9 s to import (see _open_client).
    from mcp import Client
    from mcp_types import CallToolResult

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How long listing a server's tools may take (start-up included).
LIST_TIMEOUT_S = 30.0
#: Most pages of ``tools/list`` read from one server.
MAX_LIST_PAGES = 20
#: ``_meta`` key carrying a write's idempotency key (servers may ignore it).
IDEMPOTENCY_META_KEY = "io.agentreach/idempotency-key"
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


class MCPUnavailable(Exception):
    """The server could not be started or reached, or dropped the connection."""


class MCPCallTimeout(ToolError):
    """The server did not answer within the tool's timeout."""

    error_class = ErrorClass.TIMEOUT


# -- configuration -----------------------------------------------------------------


#: A variable name a stdio server's environment may set.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: ``{{secret:NAME}}`` in an environment value (the HTTP tools' header syntax).
ENV_SECRET = re.compile(r"\{\{secret:([A-Za-z0-9_]+)\}\}")
_ENV_SECRET_START = re.compile(r"\{\{\s*secret\s*:", re.I)
#: What the SDK's safe environment provides; a server's settings may not replace it.
_RESERVED_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM"})


def env_errors(env: Any) -> list[str]:
    """What is wrong with a stdio server's environment settings (none: valid).

    ``env`` maps variable names to values; ``{{secret:NAME}}`` in a value is
    filled in from the secret store (``REACH_SECRET_<NAME>`` wins) at start-up.
    """
    if not isinstance(env, Mapping):
        return ['The environment is a JSON object: {"NAME": "value", ...}.']
    errors = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            errors.append(f"{name!r} is not a variable name (letters, digits, _).")
        elif name.upper() in _RESERVED_ENV:
            errors.append(f"{name} comes from the safe default environment.")
        if not isinstance(value, str):
            errors.append(f"The value of {name} is a string.")
        elif len(ENV_SECRET.findall(value)) != len(_ENV_SECRET_START.findall(value)):
            errors.append(
                f"The value of {name} has a malformed secret reference; write "
                "{{secret:NAME}}."
            )
    return errors


def env_secrets(env: Mapping[str, Any]) -> list[str]:
    """Names of the secrets a server's environment references."""
    names: list[str] = []
    for value in env.values():
        for name in ENV_SECRET.findall(str(value)):
            if name not in names:
                names.append(name)
    return names


def _resolved_env(
    env: Mapping[str, Any],
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The environment with its secrets filled in, and the secrets not found."""
    missing: list[str] = []

    def secret(match: re.Match[str]) -> str:
        value = secret_value(match.group(1))
        if value is None:
            missing.append(match.group(1))
            return ""
        return value

    resolved = tuple(
        sorted(
            (str(name), ENV_SECRET.sub(secret, str(value)))
            for name, value in env.items()
        )
    )
    return resolved, tuple(missing)


@dataclass(frozen=True)
class ServerConfig:
    """How to reach one MCP server; also the key of its pooled session.

    ``env`` is what a stdio server gets over the SDK's safe default environment
    (its secrets filled in: a changed secret makes another key, so the server is
    restarted with it); kept out of ``repr`` since it holds secret values.
    """

    name: str
    transport: str  # an MCPServer.Transport value
    command: tuple[str, ...] = ()
    url: str = ""
    cwd: str = ""
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    missing_secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, server: MCPServer) -> ServerConfig:
        env: tuple[tuple[str, str], ...] = ()
        missing: tuple[str, ...] = ()
        if server.transport == MCPServer.Transport.STDIO and server.env:
            env, missing = _resolved_env(server.env)
        return cls(
            name=server.name,
            transport=server.transport,
            command=tuple(str(part) for part in server.command or ()),
            url=server.url or "",
            cwd=str(settings.BASE_DIR),
            env=env,
            missing_secrets=missing,
        )

    @property
    def over_stdio(self) -> bool:
        """A command this process starts (else a server reached over HTTP)."""
        return self.transport == MCPServer.Transport.STDIO

    @property
    def target(self) -> str:
        """What the server is, for messages: its URL or its command line."""
        if self.transport == MCPServer.Transport.HTTP:
            return self.url
        return " ".join(self.command)

    def check(self) -> None:
        """Raise MCPUnavailable when the configuration cannot work at all."""
        if self.over_stdio:
            if not self.command:
                raise MCPUnavailable(
                    f"MCP server '{self.name}' has no command (an argv list, e.g. "
                    '["npx", "-y", "@modelcontextprotocol/server-everything"]).'
                )
            if self.missing_secrets:
                raise MCPUnavailable(
                    f"MCP server '{self.name}' needs the secret(s) "
                    + ", ".join(self.missing_secrets)
                    + ": add them under Admin → Secrets or set REACH_SECRET_<NAME>."
                )
        elif self.transport == MCPServer.Transport.HTTP:
            if not self.url.startswith(("http://", "https://")):
                raise MCPUnavailable(
                    f"MCP server '{self.name}' needs an http(s) URL, e.g. "
                    "http://127.0.0.1:8000/mcp."
                )
        else:
            raise MCPUnavailable(
                f"MCP server '{self.name}' has an unknown transport "
                f"{self.transport!r} (stdio or http)."
            )


@contextlib.asynccontextmanager
async def _open_client(
    config: ServerConfig, errlog: TextIO | None, connect_timeout_s: float
) -> AsyncIterator[Client]:
    """An initialised SDK client for ``config`` (not pooled)."""
    # The mcp SDK takes ~1.9 s to import: only processes that talk MCP load it.
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    config.check()
    if config.over_stdio:
        params = StdioServerParameters(
            command=config.command[0],
            args=list(config.command[1:]),
            cwd=config.cwd or None,
            env=dict(config.env) or None,
        )
        # The SDK passes only a small safe environment (PATH, HOME, ...) to the
        # server, plus what its settings name: credentials of this process never
        # reach a third-party server, and each server gets only its own.
        transport: Any = stdio_client(params, errlog=errlog or sys.stderr)
        async with Client(transport, cache=None) as client:
            yield client
        return
    # Ignore proxies from the environment; bound the connect, not the stream.
    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(connect_timeout_s, read=300.0),
        trust_env=False,
    )
    async with http:
        transport = streamable_http_client(config.url, http_client=http)
        async with Client(transport, cache=None) as client:
            yield client


# -- errors ------------------------------------------------------------------------


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(_leaves(inner))
        return found
    return [exc]


def _describe(exc: BaseException) -> str:
    """A one-line reason from an SDK error (task groups wrap the real one)."""
    leaves = _leaves(exc)
    first = next(
        (e for e in leaves if not isinstance(e, asyncio.CancelledError)), leaves[0]
    )
    if isinstance(first, FileNotFoundError):
        return "command not found"
    if isinstance(first, PermissionError):
        return "command not executable"
    code = getattr(first, "code", None)
    message = getattr(first, "message", None) or str(first)
    if code == _CONNECTION_CLOSED:
        return "the server closed the connection"
    name = type(first).__name__
    text = f"{name}: {message}" if message else name
    return text[:300]


def _unavailable(
    config: ServerConfig, exc: BaseException, stderr_tail: str = ""
) -> MCPUnavailable:
    verb = "could not be started" if config.over_stdio else "is unreachable"
    message = f"MCP server '{config.name}' {verb}: {_describe(exc)} ({config.target})"
    if stderr_tail:
        message += f"; its last output: {stderr_tail}"
    return MCPUnavailable(message)


def _is_connection_error(exc: BaseException) -> bool:
    for leaf in _leaves(exc):
        if getattr(leaf, "code", None) == _CONNECTION_CLOSED:
            return True
        if isinstance(
            leaf,
            OSError
            | httpx2.TransportError
            | anyio.ClosedResourceError
            | anyio.BrokenResourceError
            | anyio.EndOfStream,
        ):
            return True
    return False


# -- the loop thread and pooled sessions -------------------------------------------


class _Session:
    """One long-lived connection, owned by a task on the MCP loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.client: Client | None = None
        self.error: BaseException | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.dead = False
        self.stderr = _StderrTail(config.name) if config.over_stdio else None
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        errlog = self.stderr.writer if self.stderr is not None else None
        try:
            async with _open_client(self.config, errlog, 10.0) as client:
                self.client = client
                self.ready.set()
                await self.stop.wait()
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            self.error = exc
        finally:
            self.dead = True
            self.client = None
            self.ready.set()

    def close_log(self) -> None:
        if self.stderr is not None:
            self.stderr.close()

    def stderr_tail(self) -> str:
        return self.stderr.tail() if self.stderr is not None else ""


class _StderrTail:
    """A stdio server's stderr: logged at debug level, its last lines kept.

    A pipe, not a file: a server that talks for weeks fills no disk.
    """

    def __init__(self, server: str, keep: int = 20) -> None:
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._thread = threading.Thread(
            target=self._read,
            args=(os.fdopen(read_fd, encoding="utf-8", errors="replace"), server),
            name=f"reach-mcp-stderr-{server}",
            daemon=True,
        )
        self._thread.start()

    def _read(self, stream: TextIO, server: str) -> None:
        with stream:
            for raw in stream:
                line = raw.strip()
                if line:
                    self._lines.append(line)
                    log.debug("MCP server %s: %s", server, line)

    def close(self) -> None:
        if not self.writer.closed:
            self.writer.close()

    def tail(self, lines: int = 3, limit: int = 300) -> str:
        """The last lines written; waits briefly for a server that just exited."""
        self.close()
        self._thread.join(timeout=0.5)
        return " | ".join(list(self._lines)[-lines:])[-limit:]


class _Pool:
    """The per-process MCP loop and its sessions by server configuration."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[ServerConfig, _Session] = {}
        self.thread = threading.Thread(
            target=self._run, name="reach-mcp-loop", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[_T], timeout_s: float) -> _T:
        """Run ``coro`` on the loop and wait at most ``timeout_s`` for it."""

        async def wrapper() -> _T:
            return await coro

        future = asyncio.run_coroutine_threadsafe(wrapper(), self.loop)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def session(self, config: ServerConfig, timeout_s: float) -> _Session:
        """The live session for ``config``, started (and awaited) if need be."""
        session = self.sessions.get(config)
        if session is None or session.dead:
            # A server whose settings changed: close the session of the old ones.
            for other in list(self.sessions.values()):
                if other.config.name == config.name and other.config != config:
                    self.discard(other)
            session = _Session(config)
            self.sessions[config] = session
            session.task = asyncio.get_running_loop().create_task(session.run())
        try:
            await asyncio.wait_for(session.ready.wait(), timeout=timeout_s)
        except TimeoutError:
            self.discard(session)
            raise MCPUnavailable(
                f"MCP server '{config.name}' did not start within {timeout_s:g} s "
                f"({config.target})."
            ) from None
        if session.client is None:
            tail = session.stderr_tail()
            self.discard(session)
            raise _unavailable(
                config, session.error or RuntimeError("no session"), tail
            )
        return session

    def discard(self, session: _Session) -> None:
        if self.sessions.get(session.config) is session:
            del self.sessions[session.config]
        session.stop.set()
        if session.task is not None and not session.ready.is_set():
            # Still connecting (maybe hung): cancel; the SDK stops the process.
            session.task.cancel()
        if session.task is not None:
            session.task.add_done_callback(lambda _: session.close_log())
        else:
            session.close_log()

    async def close_all(self) -> None:
        sessions = list(self.sessions.values())
        self.sessions.clear()
        for session in sessions:
            session.stop.set()
        tasks = [s.task for s in sessions if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=8.0)


_pool_lock = threading.Lock()
_pool_instance: _Pool | None = None


def _pool() -> _Pool:
    global _pool_instance
    with _pool_lock:
        # A forked child has no loop thread: make its own.
        if _pool_instance is None or _pool_instance.pid != os.getpid():
            _pool_instance = _Pool()
        return _pool_instance


def close_sessions() -> None:
    """Close every pooled session (stdio servers exit); used at exit and by tests."""
    pool = _pool_instance
    if pool is None or pool.pid != os.getpid() or not pool.thread.is_alive():
        return
    with contextlib.suppress(Exception):
        pool.run(pool.close_all(), 10.0)


atexit.register(close_sessions)


# -- listing -----------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteTool:
    """One tool as an MCP server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    title: str = ""
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None


def _remote(tool: Any) -> RemoteTool:
    notes = tool.annotations
    return RemoteTool(
        name=tool.name,
        description=(tool.description or "").strip(),
        input_schema=dict(tool.input_schema or {}),
        title=(tool.title or (notes.title if notes else None) or "").strip(),
        read_only=notes.read_only_hint if notes else None,
        destructive=notes.destructive_hint if notes else None,
        idempotent=notes.idempotent_hint if notes else None,
        open_world=notes.open_world_hint if notes else None,
    )


async def _list_once(config: ServerConfig, timeout_s: float) -> list[RemoteTool]:
    stderr = _StderrTail(config.name) if config.over_stdio else None
    errlog = stderr.writer if stderr is not None else None
    tools: list[RemoteTool] = []
    try:
        with anyio.fail_after(timeout_s):
            async with _open_client(config, errlog, min(10.0, timeout_s)) as client:
                cursor: str | None = None
                for _ in range(MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(_remote(t) for t in page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
    except TimeoutError:
        raise MCPUnavailable(
            f"MCP server '{config.name}' did not list its tools within "
            f"{timeout_s:g} s ({config.target})."
        ) from None
    except MCPUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - every SDK failure becomes one message
        tail = stderr.tail() if stderr is not None else ""
        raise _unavailable(config, exc, tail) from exc
    finally:
        if stderr is not None:
            stderr.close()
    return tools


def list_server_tools(
    server: MCPServer | ServerConfig, *, timeout_s: float = LIST_TIMEOUT_S
) -> list[RemoteTool]:
    """The tools ``server`` lists now (a fresh connection); raise MCPUnavailable."""
    config = server if isinstance(server, ServerConfig) else ServerConfig.of(server)
    config.check()
    try:
        return _pool().run(_list_once(config, timeout_s), timeout_s + 5.0)
    except concurrent.futures.TimeoutError:
        raise MCPUnavailable(
            f"MCP server '{config.name}' did not list its tools within "
            f"{timeout_s:g} s ({config.target})."
        ) from None


# -- calling -----------------------------------------------------------------------


async def _call(
    config: ServerConfig,
    name: str,
    arguments: dict[str, Any],
    timeout_s: float,
    meta: dict[str, Any] | None,
) -> CallToolResult:
    pool = _pool()
    started = time.monotonic()
    session = await pool.session(config, timeout_s)
    remaining = max(0.05, timeout_s - (time.monotonic() - started))
    client = session.client
    if client is None:  # pragma: no cover - session() checked it
        raise MCPUnavailable(f"MCP server '{config.name}' has no session.")
    try:
        return await asyncio.wait_for(
            client.call_tool(
                name,
                arguments,
                read_timeout_seconds=remaining,
                meta=meta,  # type: ignore[arg-type]
            ),
            timeout=remaining + 0.5,
        )
    except TimeoutError:
        raise MCPCallTimeout(
            f"{name} on MCP server '{config.name}' did not answer within "
            f"{timeout_s:g} s."
        ) from None
    except Exception as exc:
        if getattr(exc, "code", None) == _REQUEST_TIMEOUT:
            raise MCPCallTimeout(
                f"{name} on MCP server '{config.name}' did not answer within "
                f"{timeout_s:g} s."
            ) from None
        if _is_connection_error(exc):
            tail = session.stderr_tail()
            pool.discard(session)
            raise _unavailable(config, exc, tail) from exc
        raise


def call_remote_tool(
    config: ServerConfig,
    name: str,
    arguments: dict[str, Any],
    *,
    timeout_s: float,
    meta: dict[str, Any] | None = None,
) -> CallToolResult:
    """Call ``name`` on the pooled session of ``config``, within ``timeout_s``."""
    config.check()
    try:
        return _pool().run(
            _call(config, name, arguments, timeout_s, meta), timeout_s + 1
        )
    except concurrent.futures.TimeoutError:
        raise MCPCallTimeout(
            f"{name} on MCP server '{config.name}' did not answer within "
            f"{timeout_s:g} s."
        ) from None


def result_data(result: CallToolResult, *, max_error_chars: int = 1000) -> Any:
    """An MCP tool result as JSON data; a result flagged ``isError`` raises ToolError.

    Structured content wins; otherwise text blocks become a string (or the JSON
    they hold), several blocks a list, and binary blocks a short description.
    """
    blocks = [_block_data(block) for block in result.content or []]
    if result.is_error:
        texts = [b if isinstance(b, str) else json.dumps(b) for b in blocks]
        message = "\n".join(t for t in texts if t).strip()
        raise ToolError(
            (message or "The MCP tool reported an error without a message.")[
                :max_error_chars
            ]
        )
    if result.structured_content is not None:
        return result.structured_content
    if not blocks:
        return None
    if len(blocks) == 1:
        only = blocks[0]
        if isinstance(only, str):
            return _maybe_json(only)
        return only
    return blocks


def _maybe_json(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return loads_strict(stripped)
        except ValueError:
            return text
    return text


def _block_data(block: Any) -> Any:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(getattr(block, "data", "") or "") * 3 // 4
        return {
            "type": kind,
            "mime_type": getattr(block, "mime_type", None),
            "omitted": f"binary content of about {size} bytes, not shown",
        }
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        data: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if text is not None:
            data["text"] = text
        else:
            data["omitted"] = "binary resource, not shown"
        return data
    if kind == "resource_link":
        return {
            "type": "resource_link",
            "uri": str(block.uri),
            "name": getattr(block, "name", None),
        }
    return {"type": kind or "unknown", "omitted": "content not shown"}


def mcp_handler(tool: Tool) -> Handler | None:
    """The engine handler calling ``tool``'s MCP server; None if it has no server."""
    server = tool.mcp_server
    if server is None:
        return None
    config = ServerConfig.of(server)
    remote_name = tool.mcp_tool or tool.name
    server_enabled = server.enabled
    configured_timeout = float(tool.timeout_s)
    is_write = tool.risk != Risk.READ_ONLY

    def handle(arguments: dict[str, Any], context: CallContext) -> Any:
        if not server_enabled:
            raise ToolError(
                f"The MCP server '{config.name}' is disabled; this tool is unavailable."
            )
        # Answer before the engine abandons the call, so the error is ours.
        remaining = context.deadline - time.monotonic() - 0.2
        timeout_s = max(0.1, min(configured_timeout, remaining))
        meta = None
        if is_write and context.idempotency_key:
            meta = {IDEMPOTENCY_META_KEY: context.idempotency_key}
        try:
            result = call_remote_tool(
                config, remote_name, arguments, timeout_s=timeout_s, meta=meta
            )
        except MCPUnavailable as exc:
            raise RetryableToolError(str(exc)) from None
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - protocol errors go to the model
            message = getattr(exc, "message", None) or str(exc)
            raise ToolError(
                f"The MCP server '{config.name}' refused the call of {remote_name}: "
                f"{message}"[:1000]
            ) from None
        return result_data(result)

    return handle
