"""Oversized and malformed input at every JSON door: a clear 4xx, nothing written.

Each door (a message, an approver's edit, a decision, a trace import, a tool
registration) gets the same table of malformed bodies and its own table of
wrong-typed fields, over real HTTP handling with real bearer tokens on the real
database. Every answer must be a 4xx in the API's error shape (an ``error``
message), and no table the door writes to may gain or change a row.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.apps import apps

from approvals.models import ApprovalRequest
from registry.models import Tool
from tests.support.cast import EMAIL
from tests.support.clients import bearer_client, decision_url, post_json
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, pending
from tests.support.samples import HTTP_TOOL, MALFORMED, nested, trace

pytestmark = pytest.mark.django_db(transaction=True)

#: The tables a door could write to; every one must stay as it was.
WRITTEN = [
    "runs.Conversation",
    "runs.Task",
    "runs.Message",
    "runs.Step",
    "registry.Tool",
    "registry.ToolVersion",
    "approvals.ApprovalRequest",
    "approvals.ApprovalVote",
    "audit.AuditEvent",
    "effects.Outbox",
    "effects.Ticket",
]


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row of every table in :data:`WRITTEN` (to compare before/after)."""
    rows = {}
    for label in WRITTEN:
        model = apps.get_model(label)
        rows[label] = [
            {k: v for k, v in row.items() if k not in ("last_used_at",)}
            for row in model.objects.order_by("pk").values()
        ]
    return rows


def as_json(value: Any) -> bytes:
    return json.dumps(value).encode()


Body = bytes | dict[str, Any] | list[Any] | str | int | None


def raw(body: Body) -> bytes:
    return body if isinstance(body, bytes) else as_json(body)


def refusals(
    client: Any,
    url: str,
    cases: list[tuple[str, Body]],
    *,
    field_errors: dict[str, str] | None = None,
) -> list[str]:
    """POST each case to ``url``; what went wrong with the answers (empty: none).

    ``field_errors`` maps a case's label to the field its answer must name.
    """
    problems = []
    for label, body in cases:
        before = snapshot()
        response = post_json(client, url, body)
        code = response.status_code
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not 400 <= code < 500:
            problems.append(f"{label}: {code} {response.content[:300]!r}")
        elif not isinstance(answer, dict) or not isinstance(answer.get("error"), str):
            problems.append(f"{label}: {code} without an error message: {answer!r}")
        elif (
            field_errors
            and label in field_errors
            and field_errors[label] not in (answer)
        ):
            problems.append(
                f"{label}: no field error for {field_errors[label]}: {answer!r}"
            )
        if snapshot() != before:
            problems.append(f"{label}: {code} but rows were written")
    return problems


@pytest.fixture
def small_bodies(settings: Any) -> int:
    """A body limit small enough to go over cheaply (Django's setting)."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 50_000
    settings.REACH_MAX_IMPORT_BYTES = 50_000
    return 50_000


def oversized(limit: int) -> list[tuple[str, Body]]:
    return [("a body over the size limit", {"content": "x" * limit, "pad": 1})]


def test_malformed_messages_are_refused_and_start_no_task(
    alice: Any, demo: Any, small_bodies: int, settings: Any
) -> None:
    client = bearer_client(alice)
    conversation = client.post("/api/conversations/", {}, format="json").json()
    url = f"/api/conversations/{conversation['id']}/messages/"
    cases: list[tuple[str, Body]] = [
        *MALFORMED,
        *oversized(small_bodies),
        ("content missing", {"text": "hi"}),
        ("content null", {"content": None}),
        ("content a number", {"content": 5}),
        ("content a list", {"content": ["hi"]}),
        ("content an object", {"content": {"text": "hi"}}),
        ("content blank", {"content": "   "}),
        ("content too long", {"content": "x" * (settings.REACH_MAX_MESSAGE_CHARS + 1)}),
        ("content with a lone surrogate", b'{"content": "hi \\ud83d"}'),
        ("content with a NUL", b'{"content": "hi\\u0000"}'),
        ("content nested deep", {"content": json.loads(nested(100))}),
    ]

    problems = refusals(client, url, cases)
    assert not problems, "\n".join(problems)


@pytest.fixture
def email_pending(alice: Any, demo: Any, model: Any) -> ApprovalRequest:
    """alice's run waits for approval of an email to ops."""
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    task = ask(alice, demo.agent, "mail the report")
    [approval] = pending(task)
    return approval


def test_malformed_edits_are_refused_and_the_request_stays_pending(
    operator: Any, email_pending: ApprovalRequest
) -> None:
    client = bearer_client(operator)

    def edit(arguments: Any) -> bytes:
        return b'{"decision": "approve", "arguments": ' + raw(arguments) + b"}"

    cases: list[tuple[str, Body]] = [
        ("arguments a list", edit(["ops@example.com"])),
        ("arguments a string", edit("ops@example.com")),
        ("arguments a number", edit(5)),
        ("arguments empty", edit({})),
        ("a required argument missing", edit({"to": "a@example.com", "body": "b"})),
        ("an argument of the wrong type", edit({**EMAIL, "to": 5})),
        ("an argument the tool lacks", edit({**EMAIL, "cc": "boss@example.com"})),
        ("an argument too large", edit({**EMAIL, "subject": 10**30})),
        ("arguments nested deep", edit({**EMAIL, "body": json.loads(nested(100))})),
        ("arguments nested too deep to parse", edit(nested(50_000).encode())),
        ("a lone surrogate in an argument", edit(b'{"to": "\\udc00@example.com"}')),
        ("a NUL in an argument", edit(b'{"to": "a\\u0000@example.com"}')),
        ("a number out of range", edit(b'{"to": 1e999}')),
    ]

    problems = refusals(client, decision_url(email_pending), cases)
    assert not problems, "\n".join(problems)
    email_pending.refresh_from_db()
    assert email_pending.status == ApprovalRequest.Status.PENDING
    assert email_pending.arguments == EMAIL


def test_malformed_decisions_are_refused_and_the_request_stays_pending(
    operator: Any, email_pending: ApprovalRequest, small_bodies: int
) -> None:
    client = bearer_client(operator)
    cases: list[tuple[str, Body]] = [
        *MALFORMED,
        *oversized(small_bodies),
        ("decision missing", {"reason": "no"}),
        ("decision null", {"decision": None}),
        ("decision a number", {"decision": 1}),
        ("decision a list", {"decision": ["approve"]}),
        ("decision an object", {"decision": {"approve": True}}),
        ("decision unknown", {"decision": "maybe"}),
        ("decision in capitals", {"decision": "APPROVE"}),
        ("a rejection without a reason", {"decision": "reject"}),
        ("a rejection with a blank reason", {"decision": "reject", "reason": "  "}),
        ("mark_done on an ordinary request", {"decision": "mark_done"}),
        ("a decision nested deep", {"decision": json.loads(nested(100))}),
        ("a decision with a lone surrogate", b'{"decision": "approve\\ud800"}'),
    ]

    problems = refusals(client, decision_url(email_pending), cases)
    assert not problems, "\n".join(problems)
    email_pending.refresh_from_db()
    assert email_pending.status == ApprovalRequest.Status.PENDING


def changed(part: str | None = None, *, step: int | None = None, **fields: Any) -> Any:
    """The sample trace with ``fields`` set at its top, in ``part`` (``task``,
    ``agent``, ``conversation``) or in step number ``step``."""
    document = trace()
    if step is not None:
        document["steps"][step].update(fields)
    elif part is not None:
        document[part].update(fields)
    else:
        document.update(fields)
    return document


def without(key: str) -> dict[str, Any]:
    document = trace()
    del document[key]
    return document


def agent_tool(**fields: Any) -> dict[str, Any]:
    return changed("agent", tools=[{"name": "x", **fields}])


def test_malformed_trace_documents_are_refused_and_import_nothing(
    operator: Any, demo: Any, small_bodies: int
) -> None:
    client = bearer_client(operator)
    deep = json.loads(nested(100))
    usage = {**trace()["task"]["usage"], "total_tokens": -1}
    bad_id = {"id": [1], "function": {"name": "calculate"}}
    surrogate = b'"\\ud800"}'
    cases: list[tuple[str, Body]] = [
        *MALFORMED,
        ("a document over the size limit", changed(pad="x" * small_bodies)),
        ("format missing", without("format")),
        ("task a list", changed(task=[])),
        ("status unknown", changed("task", status="done")),
        ("status a list", changed("task", status=["succeeded"])),
        ("stop_reason an object", changed("task", stop_reason={"a": 1})),
        ("usage negative", changed("task", usage=usage)),
        ("usage a string", changed("task", usage="lots")),
        ("steps an object", changed(steps={"1": {}})),
        ("a step a string", changed(steps=[*trace()["steps"], "step"])),
        ("a seq of 2**70", changed(step=0, seq=2**70)),
        ("a seq of 2**40", changed(step=0, seq=2**40)),
        ("a seq a float", changed(step=0, seq=1.5)),
        ("a kind a list", changed(step=0, kind=["model_call"])),
        ("a time in year 0", changed("task", created_at="0000-01-01T00:00:00")),
        ("a time past the end", changed("task", finished_at="9999-12-31T23:59-23:59")),
        ("a time of 10**4 digits", changed(step=1, started_at="1" * 10_000)),
        ("messages a number", changed("conversation", messages=5)),
        ("a message a string", changed("conversation", messages=["hi"])),
        ("agent limits a list", changed("agent", limits=[1])),
        ("agent instructions a list", changed("agent", instructions=["be"])),
        ("agent name a number", changed("agent", name=5)),
        ("agent model a list", changed("agent", model=["m"])),
        ("a tool's parameters a number", agent_tool(parameters=5)),
        ("a tool's risk unknown", agent_tool(risk="mild")),
        ("a tool's max_retries a list", agent_tool(max_retries=[1])),
        ("a tool's schema not one", agent_tool(parameters={"type": "thing"})),
        ("approvals a string", changed(approvals="none")),
        ("attempts an object", changed(step=0, attempts={"n": 1})),
        ("a result nested deep", changed(step=1, result=deep)),
        ("a tool name of 10**4 chars", changed(step=1, tool="t" * 10_000)),
        ("tool_calls a number", changed(step=0, response={"tool_calls": 5})),
        ("a tool call a string", changed(step=0, response={"tool_calls": ["c"]})),
        ("a tool call's id a list", changed(step=0, response={"tool_calls": [bad_id]})),
        ("a response's content a list", changed(step=2, response={"content": [1]})),
        ("a goal of the wrong type", changed("task", goal={"text": "x"})),
        ("an error of the wrong type", changed("task", error=["boom"])),
        ("a lone surrogate in a result", as_json(trace()).replace(b'"2"}', surrogate)),
    ]  # fmt: skip

    problems = refusals(client, "/api/traces/import/", cases)
    assert not problems, "\n".join(problems)


def test_malformed_tool_definitions_are_refused_with_field_errors(
    admin_user: Any, demo: Any, small_bodies: int
) -> None:
    client = bearer_client(admin_user)
    base = HTTP_TOOL

    deep = json.loads(nested(100))
    parens = "(" * 500 + "1" + ")" * 500

    def tool(**fields: Any) -> dict[str, Any]:
        return {**base, **fields}

    def http(**fields: Any) -> dict[str, Any]:
        return tool(http={**base["http"], **fields})

    def surrogate_in(text: str, **fields: Any) -> bytes:
        return as_json(tool(**fields)).replace(text.encode(), b"\\udfff")

    cases: list[tuple[str, Body]] = [
        *MALFORMED,
        *oversized(small_bodies),
        ("name missing", {k: v for k, v in base.items() if k != "name"}),
        ("name a number", tool(name=5)),
        ("name a lone surrogate", surrogate_in("X", name="fetch_X")),
        ("url a lone surrogate", surrogate_in("weather.")),
        ("name with a NUL", as_json(tool(name="fetch_X")).replace(b"X", b"\\u0000")),
        ("max_retries hugely negative", tool(max_retries=-(10**30))),
        ("max_retries negative", tool(max_retries=-1)),
        ("max_retries huge", tool(max_retries=10**30)),
        ("max_retries a float", tool(max_retries=1.5)),
        ("approval_ttl_s huge", tool(approval_ttl_s=2**63)),
        ("max_result_chars negative", tool(max_result_chars=-5)),
        ("cache_ttl_s huge", tool(cache_ttl_s=10**20)),
        ("rate_limit_per_min huge", tool(rate_limit_per_min=2**40)),
        ("approvals_required huge", tool(approvals_required=10**30)),
        ("timeout_s huge", tool(timeout_s=10**400)),
        ("risk a number", tool(risk=5)),
        ("risk a list", tool(risk=["read_only"])),
        ("risk an object", tool(risk={"read_only": True})),
        ("risk null", tool(risk=None)),
        ("risk unknown", tool(risk="harmless")),
        ("enabled a string", tool(enabled="yes")),
        ("enabled a number", tool(enabled=1)),
        ("enabled null", tool(enabled=None)),
        ("enabled a list", tool(enabled=[True])),
        ("http a string", tool(http="https://weather.example.com")),
        ("http a list", tool(http=["GET"])),
        ("http null", tool(http=None)),
        ("http a number", tool(http=5)),
        ("http url a number", http(url=5)),
        ("http url a list", http(url=["https://a"])),
        ("http method a list", http(method=["GET"])),
        ("http headers a list", http(headers=["a"])),
        ("http query values numbers", http(query={"q": 5})),
        ("http allowed_hosts a string", http(allowed_hosts="a")),
        ("http response_fields numbers", http(response_fields=[1])),
        ("parameters nested deep", tool(parameters={"type": "object", "x": deep})),
        ("parameters a list", tool(parameters=[])),
        ("tags a string", tool(tags="demo")),
        ("tags of numbers", tool(tags=[1])),
        ("result_fields of numbers", tool(result_fields=[1])),
        ("approval_rule a number", tool(approval="rule", approval_rule=5)),
        ("approval_rule nested deep", tool(approval="rule", approval_rule=parens)),
        ("kind unknown", tool(kind="shell")),
        ("kind a list", tool(kind=["http"])),
        ("mcp a string", tool(kind="mcp", mcp="server")),
        ("mcp server a list", tool(kind="mcp", mcp={"server": ["a"]})),
    ]  # fmt: skip
    field_errors = {
        "name a lone surrogate": "name",
        "url a lone surrogate": "http",
        "name with a NUL": "name",
        "max_retries hugely negative": "max_retries",
        "max_retries negative": "max_retries",
        "max_retries huge": "max_retries",
        "risk a number": "risk",
        "risk a list": "risk",
        "risk an object": "risk",
        "enabled a string": "enabled",
        "enabled a number": "enabled",
        "http a string": "http",
        "http a list": "http",
        "http url a number": "http",
        "approval_ttl_s huge": "approval_ttl_s",
        "cache_ttl_s huge": "cache_ttl_s",
    }

    problems = refusals(client, "/api/tools/", cases, field_errors=field_errors)
    assert not problems, "\n".join(problems)
    assert not Tool.objects.filter(name__startswith="fetch_").exists()
