"""Test-only python tool handlers, registered by name like the built-ins.

Imported by the test process directly, and by worker subprocesses through the
settings hook ``REACH_EXTRA_TOOL_MODULES=tests.support.extra_tools``.
Handlers that must be counted across processes append lines to the file named by
``REACH_TEST_TOOL_LOG``: ``start <idempotency key>`` when they begin and ``done
<idempotency key>`` when they return, so a test can tell a completed execution
from one cut short by a SIGKILL.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any

from engine.execution import RetryableToolError, ToolError
from engine.spec import CallContext
from registry.handlers import register

#: Executions per tool name in this process.
EXECUTIONS: Counter[str] = Counter()
#: Set it to let ``hang_lookup`` handlers return (tests set it when they end).
RELEASE = threading.Event()
_lock = threading.Lock()
_failures: Counter[str] = Counter()

KEY_SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
    "additionalProperties": False,
}
SLOW_SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "seconds": {"type": "number"}},
    "required": ["key"],
    "additionalProperties": False,
}


def _count(name: str) -> None:
    with _lock:
        EXECUTIONS[name] += 1


def _log(event: str, context: CallContext) -> None:
    path = os.environ.get("REACH_TEST_TOOL_LOG")
    if not path:
        return
    with _lock, open(path, "a", encoding="utf-8") as log:
        log.write(f"{event} {context.tool.name} {context.idempotency_key}\n")
        log.flush()
        os.fsync(log.fileno())


def reset() -> None:
    """Forget counts and failures; block ``hang_lookup`` again."""
    with _lock:
        EXECUTIONS.clear()
        _failures.clear()
    RELEASE.clear()


@register("count_lookup")
def count_lookup(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    """A cheap read that counts its executions."""
    _count("count_lookup")
    return {"key": arguments["key"], "value": f"value of {arguments['key']}"}


@register("slow_lookup")
def slow_lookup(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    """A read that takes ``seconds`` (default 2) and logs its start and end."""
    _count("slow_lookup")
    _log("start", context)
    time.sleep(float(arguments.get("seconds", 2.0)))
    _log("done", context)
    return {"key": arguments["key"], "value": f"slow value of {arguments['key']}"}


@register("hang_lookup")
def hang_lookup(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    """A read that ignores its deadline and hangs until the test releases it."""
    _count("hang_lookup")
    RELEASE.wait(60)
    return {"key": arguments["key"], "value": "late"}


@register("broken_lookup")
def broken_lookup(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    """A read whose upstream is down for good."""
    _count("broken_lookup")
    raise ToolError("The upstream service answered 500.")


@register("flaky_lookup")
def flaky_lookup(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    """Fails twice per key with a transient error, then answers."""
    _count("flaky_lookup")
    with _lock:
        _failures[arguments["key"]] += 1
        failures = _failures[arguments["key"]]
    if failures <= 2:
        raise RetryableToolError(f"503 from upstream (try {failures})")
    return {"key": arguments["key"], "value": "finally"}


@register("big_lookup")
def big_lookup(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    """A large report: many filler lines and one that matters."""
    _count("big_lookup")
    key = arguments["key"]
    lines = [
        f"section {i} of the {key} report, nothing of note {'.' * 50}"
        for i in range(40)
    ]
    lines.insert(11, f"{key} budget expression: 128 * 6 + 320")
    return {"key": key, "lines": lines}


def install(name: str, *, schema: dict[str, Any] | None = None, **fields: Any) -> Any:
    """Register a Tool row for handler ``name``, offered to the demo agent."""
    from registry.models import Tool
    from registry.services import tool_save

    tool = Tool.objects.filter(name=name).first() or Tool(name=name)
    tool.description = f"Test tool {name}: looks a key up."
    tool.parameters = schema or (SLOW_SCHEMA if name == "slow_lookup" else KEY_SCHEMA)
    tool.kind = Tool.Kind.PYTHON
    tool.handler = name
    tool.tags = ["demo"]
    for field, value in fields.items():
        setattr(tool, field, value)
    tool, _ = tool_save(tool=tool)
    return tool
