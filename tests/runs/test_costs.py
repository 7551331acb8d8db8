"""Costs and budgets through the real runner, the real openai SDK and the
scripted model server: prices, step and task costs, estimated usage, the cost
budget of a run, the daily budget of a user and a tool's max_calls_per_run.
"""

from __future__ import annotations

import datetime as dt
import importlib
import re
from decimal import Decimal
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AuditEvent, AuditKind
from engine.pricing import format_usd
from engine.spec import StepKind
from registry.models import ModelPrice, Tool
from registry.services import model_price, tool_save
from runs import services as runs
from runs.models import DailyBudget, Message, Task
from tests.support.clients import (
    fork,
    import_trace,
    logged_in,
    post_message,
    steps_of,
    task_of,
    trace_of,
)
from tests.support.replies import Script, text, tool_call, with_usage, without_usage
from tests.support.runs import advance, ask, claimed, model_step
from tests.support.scripted_model import tool_messages
from traces.replay import task_rerun

pytestmark = pytest.mark.django_db(transaction=True)


def priced(input_per_m: str = "1", output_per_m: str = "2", cached: str = "0.1"):
    """A price for the scripted model (the test database has no list prices)."""
    return ModelPrice.objects.create(
        pattern="scripted-*",
        input_usd_per_m=Decimal(input_per_m),
        output_usd_per_m=Decimal(output_per_m),
        cached_input_usd_per_m=Decimal(cached),
    )


def calc(expression: str) -> Any:
    return tool_call("calculate", {"expression": expression})


def audited(kind: str, task: Task | None = None) -> list[AuditEvent]:
    events = AuditEvent.objects.filter(kind=kind)
    if task is not None:
        events = events.filter(task_id=str(task.pk))
    return list(events.order_by("position"))


# -- prices and costs ----------


def test_a_priced_run_records_each_model_calls_cost_and_sums_it_on_the_task(
    alice, demo, model, api_client_for
):
    priced()
    model(Script([calc("1+1"), text("2")]))
    task = ask(alice, demo.agent, "what is 1+1?")

    assert task.status == "succeeded", task.error_message
    calls = list(task.steps.filter(kind=StepKind.MODEL_CALL).order_by("seq"))
    for call in calls:
        usage = call.usage
        expected = (usage["prompt_tokens"] * 1 + usage["completion_tokens"] * 2) / 1e6
        assert call.cost_usd == pytest.approx(expected)
    assert task.cost_usd == pytest.approx(sum(c.cost_usd for c in calls))
    assert task.agent_snapshot["price"]["pattern"] == "scripted-*"

    client = api_client_for(alice)
    assert task_of(client, task.pk)["cost_usd"] == pytest.approx(task.cost_usd)
    steps = steps_of(client, task.pk)
    assert [s["cost_usd"] is not None for s in steps] == [True, False, True]

    chat = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert re.search(r"<span data-cost>\$0\.\d+</span>", chat)
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="cost">$0.' in trace
    assert "at scripted-*" in trace


def test_a_model_with_no_price_shows_cost_unknown_never_zero(
    alice, demo, model, api_client_for
):
    model(Script([calc("1+1"), text("2")]))
    task = ask(alice, demo.agent, "what is 1+1?")

    assert task.cost_usd is None
    assert model_price("scripted-model") is None
    client = api_client_for(alice)
    assert task_of(client, task.pk)["cost_usd"] is None
    assert all(s["cost_usd"] is None for s in steps_of(client, task.pk))

    chat = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert "cost unknown" in chat and "$0.00" not in chat
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="cost">cost unknown</span>' in trace
    assert "no price names scripted-model" in trace
    stats = logged_in(alice).get("/traces/stats/").content.decode()
    assert 'data-testid="total-cost">cost unknown</span>' in stats


def test_cached_prompt_tokens_are_priced_at_the_cached_price(alice, demo, model):
    priced(input_per_m="10", output_per_m="20", cached="1")
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "total_tokens": 1100,
        "prompt_tokens_details": {"cached_tokens": 800},
    }
    model(Script([with_usage(text("hi"), usage)]))
    task = ask(alice, demo.agent, "hello")

    [call] = task.steps.all()
    assert call.usage["cached_tokens"] == 800
    # 200 fresh at $10/M, 800 cached at $1/M, 100 out at $20/M.
    assert call.cost_usd == pytest.approx((200 * 10 + 800 * 1 + 100 * 20) / 1e6)
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert "800 prompt tokens cached" in trace


def test_missing_usage_records_estimated_tokens_and_says_so(
    alice, demo, model, api_client_for
):
    priced()
    model(Script([without_usage(calc("1+1")), without_usage(text("2"))]))
    task = ask(alice, demo.agent, "what is 1+1?")

    assert task.status == "succeeded", task.error_message
    calls = list(task.steps.filter(kind=StepKind.MODEL_CALL))
    assert all(c.usage["estimated"] is True for c in calls)
    assert all(c.usage["prompt_tokens"] > 0 for c in calls)
    assert all(c.cost_usd and c.cost_usd > 0 for c in calls)
    assert task.total_tokens == sum(c.usage["total_tokens"] for c in calls) > 0
    assert task.estimated_calls == 2

    client = api_client_for(alice)
    payload = task_of(client, task.pk)
    assert payload["usage_estimated"] is True and payload["usage"]["total_tokens"] > 0
    assert steps_of(client, task.pk)[0]["usage"]["estimated"] is True
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="usage-estimated"' in trace
    assert "estimated: the endpoint reported no usage" in trace


def test_the_token_budget_applies_to_estimated_tokens(alice, demo, model):
    demo.agent.token_budget = 50
    demo.agent.save()
    model(Script([without_usage(calc(f"{n}+1")) for n in range(6)]))
    task = ask(alice, demo.agent, "add things")

    assert (task.status, task.stop_reason) == ("stopped", "token_budget")
    assert task.steps.filter(kind=StepKind.MODEL_CALL).count() < 6


# -- the cost budget of a run ----------


def test_a_run_stopped_by_its_cost_budget_says_so_everywhere(
    alice, demo, model, api_client_for
):
    priced(input_per_m="1000", output_per_m="1000")
    demo.agent.max_cost_usd = 0.2
    demo.agent.save()
    script = Script([calc(f"{n} + 1") for n in range(30)])
    model(script)
    task = ask(alice, demo.agent, "count up")

    assert (task.status, task.stop_reason) == ("stopped", "cost_budget")
    assert task.cost_usd >= 0.2
    assert len(script.requests) < 30
    assert "cost budget" in task.error_message and "$0.2000" in task.error_message

    chat = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert "stop reason: cost_budget" in chat
    assert 'class="bubble assistant stopped"' in chat and "cost budget" in chat
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="stop-reason">cost_budget</strong>' in trace
    assert 'data-testid="cost-budget">· budget $0.2000 per run' in trace
    payload = task_of(api_client_for(alice), task.pk)
    assert (payload["status"], payload["stop_reason"]) == ("stopped", "cost_budget")

    [event] = audited(AuditKind.BUDGET_RUN_EXCEEDED, task)
    assert event.data["max_cost_usd"] == 0.2
    assert event.data["cost_usd"] == pytest.approx(task.cost_usd)
    assert alice.username not in event.actor  # the system stopped it
    # Its deterministic re-run stops at the same step, for the same reason.
    assert task_rerun(task=task).as_dict() == {"matches": True, "divergence": None}


def test_an_exported_trace_carries_its_costs_to_the_instance_that_imports_it(
    alice, operator, demo, model, api_client_for
):
    priced()
    model(Script([calc("1+1"), text("2")]))
    task = ask(alice, demo.agent, "what is 1+1?")
    document = trace_of(api_client_for(alice), task.pk)
    assert document["task"]["cost_usd"] == pytest.approx(task.cost_usd)

    response = import_trace(api_client_for(operator), document)
    assert response.status_code == 201, response.content
    imported = Task.objects.get(pk=response.json()["task"])
    assert imported.cost_usd == pytest.approx(task.cost_usd)
    assert imported.steps.get(seq=1).cost_usd == pytest.approx(
        task.steps.get(seq=1).cost_usd
    )


def test_a_fork_does_not_pay_again_for_the_steps_it_copies(
    alice, demo, model, api_client_for
):
    priced()
    model(Script([calc("1+1"), text("2"), text("again")]))
    parent = ask(alice, demo.agent, "what is 1+1?")
    response = fork(api_client_for(alice), parent, from_seq=3)
    child = advance(Task.objects.get(pk=response.json()["task"]))

    assert child.status == "succeeded", child.error_message
    [own] = child.steps.filter(kind=StepKind.MODEL_CALL, seq=3)
    assert child.cost_usd == pytest.approx(own.cost_usd)
    first = child.steps.get(seq=1)
    assert first.detail["copied_from"]["task"] == str(parent.pk)


# -- the daily budget of a user ----------


def test_a_user_over_the_daily_budget_gets_429_saying_when_it_resets(
    alice, bob, demo, model, api_client_for
):
    DailyBudget.objects.create(user=alice, max_tokens=10)
    model(Script([text("hi"), text("hello bob")]))
    first = ask(alice, demo.agent, "hello")
    assert first.total_tokens > 10

    client = api_client_for(alice)
    conversation = first.conversation_id
    response = post_message(client, conversation, "and now?")

    assert response.status_code == 429, response.content
    body = response.json()
    tomorrow = timezone.localdate() + dt.timedelta(days=1)
    midnight = timezone.make_aware(dt.datetime.combine(tomorrow, dt.time.min))
    assert body["resets_at"] == midnight.isoformat()
    assert f"resets at {tomorrow:%Y-%m-%d} 00:00 UTC" in body["error"]
    assert body["budget"]["max_tokens"] == 10
    assert body["budget"]["spent_tokens"] == first.total_tokens
    retry_after = int(response["Retry-After"])
    assert 0 < retry_after <= 86_401
    # Nothing was recorded of the refused message but the refusal.
    assert Task.objects.filter(owner=alice).count() == 1
    assert not Message.objects.filter(content="and now?").exists()
    [event] = audited(AuditKind.BUDGET_DAILY_REFUSED)
    assert event.actor == "alice" and event.data["max_tokens"] == 10

    # The chat says it too; bob has no budget and goes on.
    chat = logged_in(alice).get(f"/c/{conversation}/").content.decode()
    assert (
        'data-testid="daily-budget"' in chat and "Your daily budget is used up" in chat
    )
    bob_conversation = runs.conversation_create(owner=bob, agent=demo.agent)
    ok = post_message(api_client_for(bob), bob_conversation.pk, "hi")
    assert ok.status_code == 202, ok.content


def test_the_default_daily_budget_in_usd_applies_to_users_without_their_own(
    alice, bob, demo, model, api_client_for
):
    priced()
    DailyBudget.objects.create(user=None, max_cost_usd=0.0000001)
    DailyBudget.objects.create(user=bob, max_cost_usd=100.0)
    model(Script([text("a"), text("b"), text("c")]))
    ask(alice, demo.agent, "hello")
    ask(bob, demo.agent, "hello")

    for user, expected in ((alice, 429), (bob, 202)):
        conversation = runs.conversation_create(owner=user, agent=demo.agent)
        response = post_message(api_client_for(user), conversation.pk, "more")
        assert response.status_code == expected, (user, response.content)


def test_yesterdays_runs_do_not_count_toward_todays_budget(
    alice, demo, model, api_client_for
):
    DailyBudget.objects.create(user=alice, max_tokens=10)
    model(Script([text("hi"), text("again")]))
    first = ask(alice, demo.agent, "hello")
    Task.objects.filter(pk=first.pk).update(
        created_at=timezone.now() - dt.timedelta(days=1)
    )
    response = post_message(api_client_for(alice), first.conversation_id, "new day")
    assert response.status_code == 202, response.content


# -- a tool's max_calls_per_run ----------


def test_max_calls_per_run_refuses_the_extra_call_with_an_observation(
    alice, demo, model, api_client_for
):
    tool = Tool.objects.get(name="calculate")
    tool.max_calls_per_run = 1
    tool_save(tool=tool, user=demo.admin)
    script = Script([calc("1+1"), calc("2+2"), text("I could only add once.")])
    model(script)
    task = ask(alice, demo.agent, "add twice")

    assert task.status == "succeeded", task.error_message
    first, second = task.steps.filter(kind=StepKind.TOOL_CALL).order_by("seq")
    assert (first.status, first.result["result"]) == ("succeeded", 2)
    assert (second.status, second.error_class) == ("skipped", "tool_call_limit")
    assert second.result is None and second.started_at is None  # it never ran
    refused = tool_messages(script.requests[2])[-1]["content"]
    assert "calculate may be called at most 1 time per run" in refused

    [event] = audited(AuditKind.TOOL_CALL_LIMITED, task)
    assert event.data == {"tool": "calculate", "seq": second.seq}
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert "tool_call_limit" in trace and "at most 1 time per run" in trace
    definition = next(
        t
        for t in api_client_for(alice).get("/api/tools/").json()
        if t["name"] == "calculate"
    )
    assert definition["max_calls_per_run"] == 1


# -- the hot path and the stats ----------


def test_a_model_steps_cost_is_added_by_the_one_bump_of_its_write(alice, demo):
    ModelPrice.objects.create(
        pattern=demo.agent.effective_model, input_usd_per_m=1, output_usd_per_m=2
    )
    journal = claimed(alice, demo.agent, owner="w1")
    step = model_step("scripted-model", cost_usd=0.25)
    with CaptureQueriesContext(connection) as queries:
        journal.append([step])

    sql = [q["sql"].split(" ")[0] for q in queries.captured_queries]
    assert sql == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]
    stored = Task.objects.get(pk=journal.task_id)
    assert stored.cost_usd == pytest.approx(0.25)
    assert stored.steps.get(seq=1).cost_usd == pytest.approx(0.25)

    unpriced = claimed(alice, demo.agent, owner="w2")
    Task.objects.filter(pk=unpriced.task_id).update(cost_usd=None)
    unpriced._task.cost_usd = None
    unpriced.append([step.copy(cost_usd=None)])
    assert Task.objects.get(pk=unpriced.task_id).cost_usd is None


def test_the_stats_page_shows_cost_per_model_per_day_and_the_top_users(
    alice, bob, operator, demo, model
):
    priced()
    model(Script([text("a"), text("b"), text("c")]))
    ask(alice, demo.agent, "one")
    ask(alice, demo.agent, "two")
    ask(bob, demo.agent, "three")

    html = logged_in(operator).get("/traces/stats/").content.decode()
    costs = re.search(r'data-testid="cost-stats">(.*?)</table>', html, re.S).group(1)
    assert "scripted-model" in costs and "$0.0" in costs
    users = re.search(r'data-testid="top-users">(.*?)</table>', html, re.S).group(1)
    assert users.index('data-user="alice"') < users.index('data-user="bob"')
    assert "Cost per model per day (USD)" in html
    # A chat user sees only their own.
    mine = logged_in(bob).get("/traces/stats/").content.decode()
    assert 'data-user="alice"' not in mine
    # The trace list sums what it lists: a conversation's, an agent's runs.
    first = Task.objects.filter(owner=alice).order_by("created_at").first()
    listed = (
        logged_in(alice)
        .get(f"/traces/?conversation={first.conversation_id}")
        .content.decode()
    )
    total = re.search(r'data-testid="total-cost"[^>]*>([^<]*)<', listed).group(1)
    assert total == format_usd(first.cost_usd)


def test_the_list_prices_price_common_models_and_the_local_model_at_zero():
    migration = importlib.import_module("registry.migrations.0004_list_prices")
    ModelPrice.objects.all().delete()
    migration.add_prices(apps, None)
    edited = ModelPrice.objects.get(pattern="gpt-4o*")
    edited.input_usd_per_m = Decimal("9")
    edited.save()
    migration.add_prices(apps, None)  # create-if-missing: edits stay

    assert ModelPrice.objects.get(pattern="gpt-4o*").input_usd_per_m == Decimal("9")
    for name, pattern in [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini*"),
        ("gpt-4.1-nano", "gpt-4.1-nano*"),
        ("o3-mini", "o3-mini*"),
        ("o4-mini-2025-04-16", "o4-mini*"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku*"),
        ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet*"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4*"),
    ]:
        assert model_price(name).pattern == pattern, name
    local = model_price("qwen2.5-coder-1.5b-instruct")
    assert (local.input_per_m, local.output_per_m) == (0.0, 0.0)
