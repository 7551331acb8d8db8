"""Bodies the fuzz suites and the import tests start from: a small importable trace
document and the malformed bodies every JSON door must refuse."""

from __future__ import annotations

import copy
from typing import Any

#: A finished run as another implementation exports it (no extensions).
TRACE: dict[str, Any] = {
    "format": "reach.trace/v1",
    "task": {
        "id": "t-1",
        "conversation": "c-1",
        "agent": "assistant",
        "model": "m",
        "status": "succeeded",
        "stop_reason": "final_answer",
        "final_answer": "2",
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        "steps": 3,
        "parent": None,
        "created_at": "2026-01-02T03:04:05+00:00",
        "finished_at": "2026-01-02T03:04:06+00:00",
    },
    "conversation": {
        "id": "c-1",
        "messages": [{"role": "user", "content": "1 + 1?", "task": "t-1"}],
    },
    "agent": {"name": "elsewhere", "model": "m", "instructions": "", "tools": []},
    "steps": [
        {"seq": 1, "kind": "model_call", "status": "succeeded", "model": "m",
         "response": {"role": "assistant", "content": None, "tool_calls": [
             {"id": "c1", "type": "function",
              "function": {"name": "calculate",
                           "arguments": "{\"expression\": \"1+1\"}"}}
         ]}},
        {"seq": 2, "kind": "tool_call", "status": "succeeded", "tool": "calculate",
         "arguments": {"expression": "1+1"}, "result": {"result": 2},
         "idempotency_key": "t-1:1:0", "started_at": "2026-01-02T03:04:05+00:00",
         "finished_at": "2026-01-02T03:04:06+00:00"},
        {"seq": 3, "kind": "model_call", "status": "succeeded",
         "response": {"role": "assistant", "content": "2"}},
    ],
    "approvals": [],
    "audit": [],
    "origin": None,
}  # fmt: skip


#: An HTTP tool definition as an admin registers it (the fuzz suites mutate it).
HTTP_TOOL: dict[str, Any] = {
    "name": "fetch_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "kind": "http",
    "http": {
        "method": "GET",
        "url": "https://weather.example.com/{city}",
        "allowed_hosts": ["weather.example.com"],
    },
}


def trace() -> dict[str, Any]:
    """A fresh copy of :data:`TRACE`, to change."""
    return copy.deepcopy(TRACE)


def nested(levels: int, leaf: str = "1", *, kind: str = "[") -> str:
    """JSON text nesting ``levels`` arrays (``[``) or objects (``{``) deep."""
    if kind == "[":
        return "[" * levels + leaf + "]" * levels
    return '{"a":' * levels + leaf + "}" * levels


#: Bodies no JSON door takes, whatever it expects: (label, raw bytes).
MALFORMED: list[tuple[str, bytes]] = [
    ("an empty body", b""),
    ("not JSON", b"{"),
    ("trailing garbage", b'{"a": 1} x'),
    ("not UTF-8", b'{"a": "\xff\xfe"}'),
    ("UTF-16", '{"a": 1}'.encode("utf-16")),
    ("a byte-order mark", b'\xef\xbb\xbf{"a": 1}'),
    ("NaN", b'{"a": NaN}'),
    ("Infinity", b'{"a": -Infinity}'),
    ("a number out of float range", b'{"a": 1e400}'),
    ("an integer of 5000 digits", b'{"a": 1' + b"0" * 5000 + b"}"),
    ("arrays nested 100000 deep", nested(100_000).encode()),
    ("objects nested 20000 deep", nested(20_000, kind="{").encode()),
    ("arrays nested 200 deep", ('{"a": ' + nested(200) + "}").encode()),
    ("a lone surrogate", b'{"a": "x\\ud800y"}'),
    ("a lone surrogate in a key", b'{"\\udfff": 1}'),
    ("a NUL character", b'{"a": "x\\u0000y"}'),
    ("a top-level array", b"[1, 2]"),
    ("a top-level string", b'"approve"'),
    ("a top-level number", b"42"),
    ("null", b"null"),
    ("an empty object", b"{}"),
]
