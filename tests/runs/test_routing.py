"""Routing by intent through the real runner, the openai SDK and the scripted
model: toolsets picked by keyword rules (or by the model when rules say
nothing), only their tools offered, the intent recorded on the task, shown on
the trace, filterable in the trace list, the stats and the API, and carried on
the run's log lines; a cost budget's re-run and a routed run's re-run agree.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from engine.spec import StepKind
from infra.logging import RedactingFilter
from registry.models import Tool
from registry.services import tool_save
from runs.models import Task
from tests.support.clients import logged_in
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, start
from traces.replay import task_rerun

pytestmark = pytest.mark.django_db(transaction=True)

TOOLSETS = [
    {
        "tag": "math",
        "description": "Arithmetic with the calculator",
        "keywords": ["calculate", "计算", "sum"],
    },
    {
        "tag": "notes",
        "description": "Search the team's notes",
        "keywords": ["note", "笔记"],
    },
]


@pytest.fixture
def routed(demo: Any) -> Any:
    """The demo agent with a math and a notes toolset (the mail and ticket
    tools belong to none, so every turn is offered them)."""
    for name, tag in (("calculate", "math"), ("search_notes", "notes")):
        tool = Tool.objects.get(name=name)
        tool.tags = ["demo", tag]
        tool_save(tool=tool, user=demo.admin)
    demo.agent.toolsets = TOOLSETS
    demo.agent.full_clean()
    demo.agent.save()
    return demo.agent


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-task="([0-9a-f-]+)"', html)


def test_a_keyword_rule_picks_the_toolset_and_only_its_tools_are_offered(
    alice, routed, model, api_client_for
):
    script = Script([tool_call("calculate", {"expression": "2+3"}), text("5")])
    model(script)
    queued = start(alice, routed, "Please calculate 2+3")
    # Rules decide when the task starts: the intent is there before it runs.
    assert queued.intent == "math"
    assert queued.agent_snapshot["route"] == {
        "intent": "math",
        "tags": ["math"],
        "by": "rule",
    }
    task = advance(queued)

    assert task.status == "succeeded", task.error_message
    assert offered(script.requests[0]) == {"calculate", "create_ticket", "send_email"}
    assert len(script.requests) == 2  # no routing call
    assert api_client_for(alice).get(f"/api/tasks/{task.pk}/").json()["intent"] == (
        "math"
    )
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="intent">math</strong>' in trace
    assert "chosen by keyword rules" in trace
    chat = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert "route: math" in chat


def test_the_intent_is_filterable_in_the_trace_list_the_stats_and_the_api(
    alice, routed, model, api_client_for
):
    model(Script([text("ok"), text("ok"), text("ok")]))
    math = ask(alice, routed, "sum these up")
    notes = ask(alice, routed, "find my 笔记")
    plain = ask(alice, routed, "笔记 and calculate")
    assert (math.intent, notes.intent, plain.intent) == ("math", "notes", "math+notes")

    client = logged_in(alice)
    html = client.get("/traces/?intent=math").content.decode()
    assert listed(html) == [str(math.pk)]
    assert "<option selected>math</option>" in html
    assert set(listed(client.get("/traces/").content.decode())) == {
        str(math.pk),
        str(notes.pk),
        str(plain.pk),
    }
    stats = client.get("/traces/stats/?intent=notes").content.decode()
    assert re.search(r"1 run\b", stats)
    intents = client.get("/traces/stats/").content.decode()
    assert "Runs per intent" in intents and "?intent=math%2Bnotes" in intents
    api = api_client_for(alice).get("/api/tasks/?intent=notes").json()
    assert [t["id"] for t in api] == [str(notes.pk)]


def test_the_model_picks_the_toolset_when_no_rule_matches(
    alice, routed, model, api_client_for
):
    script = Script(
        [
            text("notes"),
            tool_call("search_notes", {"keyword": "Redis"}),
            text("We use Redis for hot queries."),
        ]
    )
    model(script)
    queued = start(alice, routed, "What did we decide about caching?")
    assert queued.intent is None
    records: list[logging.LogRecord] = []
    with captured_logs(records):
        task = advance(queued)

    assert task.status == "succeeded", task.error_message
    assert task.intent == "notes"
    routing = script.requests[0]
    assert "tools" not in routing
    assert "notes: Search the team's notes" in routing["messages"][0]["content"]
    assert routing["messages"][-1] == {
        "role": "user",
        "content": "What did we decide about caching?",
    }
    assert offered(script.requests[1]) == {
        "search_notes",
        "create_ticket",
        "send_email",
    }
    # The routing exchange is not a turn the model is shown later.
    assert [m["role"] for m in script.requests[1]["messages"]] == ["system", "user"]
    route_step = task.steps.get(seq=1)
    assert route_step.kind == StepKind.MODEL_CALL
    assert route_step.detail["route"] == {
        "intent": "notes",
        "tags": ["notes"],
        "by": "model",
    }
    assert route_step.usage["total_tokens"] > 0
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert "chosen by the model" in trace and "→ route: notes" in trace
    # Every log line of the run after the choice carries it.
    ours = [r for r in records if getattr(r, "task_id", None) == str(task.pk)]
    assert ours and getattr(ours[-1], "intent", None) == "notes"
    # A deterministic re-run routes alike.
    assert task_rerun(task=task).as_dict() == {"matches": True, "divergence": None}


def test_without_the_model_fallback_an_unmatched_message_is_offered_every_tool(
    alice, routed, model
):
    routed.route_by_model = False
    routed.save()
    script = Script([text("hello")])
    model(script)
    task = ask(alice, routed, "hello there")

    assert task.intent == "general"
    assert len(script.requests) == 1
    assert offered(script.requests[0]) == {
        "calculate",
        "search_notes",
        "create_ticket",
        "send_email",
    }


def test_a_call_of_a_tool_outside_the_route_is_refused_as_unknown(alice, routed, model):
    script = Script([tool_call("search_notes", {"keyword": "x"}), text("sorry")])
    model(script)
    task = ask(alice, routed, "calculate 1+1")

    [call] = task.steps.filter(kind=StepKind.TOOL_CALL)
    assert (call.status, call.error_class) == ("failed", "unknown_tool")
    assert "search_notes" not in call.error


def test_an_agent_without_toolsets_has_no_intent(alice, demo, model):
    model(Script([text("hi")]))
    task = ask(alice, demo.agent, "calculate things")
    assert task.intent is None
    assert "route" not in task.agent_snapshot
    assert "routing" not in task.agent_snapshot


@pytest.mark.parametrize(
    "toolsets",
    [
        {"tag": "math"},
        [{"tag": "Math"}],
        [{"tag": "none"}],
        [{"tag": "math"}, {"tag": "math"}],
        [{"tag": "math", "keywords": [""]}],
    ],
)
def test_toolsets_that_cannot_route_are_refused_when_an_admin_saves_them(
    demo, toolsets
):
    demo.agent.toolsets = toolsets
    with pytest.raises(ValidationError) as refused:
        demo.agent.full_clean()
    assert "toolsets" in refused.value.message_dict


def test_the_admin_form_saves_toolsets(demo):
    client = logged_in(demo.admin)
    page = client.get(f"/admin/registry/agent/{demo.agent.pk}/change/")
    assert page.status_code == 200
    assert 'name="toolsets"' in page.content.decode()
    assert 'name="max_cost_usd"' in page.content.decode()


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records
        self.addFilter(RedactingFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def captured_logs(records: list[logging.LogRecord]) -> Iterator[None]:
    """Collect every log record, through the product's filter, meanwhile."""
    handler, root = _Collect(records), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_every_log_line_of_a_rule_routed_run_carries_its_intent(alice, routed, model):
    model(Script([text("5")]))
    queued = start(alice, routed, "calculate 2+3")
    records: list[logging.LogRecord] = []
    with captured_logs(records):
        task = advance(queued)
    ours = [r for r in records if getattr(r, "task_id", None) == str(task.pk)]
    assert ours and all(getattr(r, "intent", None) == "math" for r in ours)
    assert Task.objects.get(pk=task.pk).intent == "math"
