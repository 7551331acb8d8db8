"""What an HTTP or MCP tool answers, however malformed: a result the model and
the database can take, or a clear tool error; never an exception that escapes
the call, and never text that would fail the step's write (a lone surrogate or
a NUL in PostgreSQL) or data too deep for the code that walks it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.types import CallToolResult, TextContent

from engine.execution import Executor, ToolResult
from engine.json_input import json_problem
from engine.spec import CallContext, ErrorClass
from registry.adapters.http import http_handler
from registry.adapters.mcp import result_data
from registry.services import spec_for
from tests.fuzz.strategies import fuzz_settings, text
from tests.support.http_servers import Reply
from tests.support.http_tools import http_tool

pytestmark = pytest.mark.django_db


def run(tool: Any) -> ToolResult:
    """The call through the engine's executor, as a run makes it."""
    spec = spec_for(tool)
    executor = Executor(backoff_base_s=0.0, sleep=lambda _s: None)
    try:
        context = CallContext("t", 1, "t:1:0", spec, time.monotonic() + spec.timeout_s)
        return executor.run(spec, http_handler(tool), {}, context)
    finally:
        executor.shutdown()


def usable(result: ToolResult) -> None:
    """Either a value anything can store, or a tool failure with its reason."""
    if result.ok:
        assert json_problem(result.value) is None
    else:
        assert result.error_class in (ErrorClass.BAD_RESULT, ErrorClass.TOOL_ERROR)
        assert result.error_class != ErrorClass.EXCEPTION and result.error


JSON = "application/json"
ANSWERS = [
    (b"[" * 100_000 + b"]" * 100_000, JSON, "nested past any stack"),
    (b'{"a": ' * 70 + b"1" + b"}" * 70, JSON, "nested deeper than taken in"),
    (b'{"name": "\\ud800"}', JSON, "a lone surrogate escape"),
    (b'{"name": "a\\u0000b"}', JSON, "a NUL escape"),
    (b"plain text with a \x00 NUL", "text/plain", "a NUL byte in text"),
    (b'{"n": NaN, "m": Infinity}', JSON, "NaN and Infinity"),
    (b'{"n": 1e400}', JSON, "a number out of range"),
    (b"\xff\xfe not utf-8 \xc3\x28", "application/json; charset=utf-8", "bad bytes"),
    (b'{"ok": true}', "application/json; charset=klingon", "an unknown charset"),
    (b'{"unterminated": ', JSON, "cut off"),
]


@pytest.mark.parametrize(
    "body,content_type,what", ANSWERS, ids=[what for *_, what in ANSWERS]
)
def test_a_malformed_http_answer_is_a_usable_result_or_a_clear_error(
    local_server,  # noqa: F811
    body,
    content_type,
    what,
):
    server = local_server(lambda hit: Reply(raw=body, content_type=content_type))
    usable(run(http_tool(server.url("/"))))


def test_a_surrogate_in_an_http_answer_fails_the_call_with_a_reason(
    local_server,  # noqa: F811
):
    server = local_server(
        lambda hit: Reply(raw=b'{"name": "\\ud800"}', content_type=JSON)
    )
    result = run(http_tool(server.url("/")))
    assert not result.ok and result.error_class == ErrorClass.BAD_RESULT
    assert "lone surrogate" in (result.error or "")


@fuzz_settings(60)
@given(
    body=st.binary(max_size=2000),
    content_type=st.sampled_from(
        [
            JSON,
            "text/plain",
            "text/html; charset=latin-1",
            "application/json; charset=x",
        ]
    ),
)
def test_any_http_answer_is_a_usable_result_or_a_clear_error(
    local_server,  # noqa: F811
    body,
    content_type,
):
    server = local_server(lambda hit: Reply(raw=body, content_type=content_type))
    usable(run(http_tool(server.url("/"))))


@fuzz_settings(80)
@given(blocks=st.lists(text.map(str), max_size=3), error=st.booleans())
def test_any_mcp_text_answer_becomes_data_or_a_tool_error(blocks, error):
    from engine.execution import ToolError, ensure_json

    result = CallToolResult(
        content=[TextContent(type="text", text=b) for b in blocks], isError=error
    )
    try:
        value = result_data(result)
    except ToolError as exc:
        assert error and str(exc)
        return
    try:
        ensure_json(value)
    except ValueError as exc:  # the executor's check: a BAD_RESULT failure
        assert "cannot be stored" in str(exc) or "nested" in str(exc)


def test_an_mcp_answer_nested_past_any_stack_stays_text():
    deep = "[" * 100_000 + "]" * 100_000
    result = CallToolResult(content=[TextContent(type="text", text=deep)])
    assert result_data(result) == deep
