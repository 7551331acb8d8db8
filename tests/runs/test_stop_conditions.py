"""Stop conditions and the execution engine through the runner.

The real database, the real ``openai`` SDK over HTTP against the scripted model
server, the bundled Redis (result cache, rate limits). Each test checks the task's
status and stop reason, what was persisted, and what the model was sent; the last
ones check that every stop reason shows in the chat and in the trace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from effects.models import Ticket
from engine.context import DATA_NOTICE, TokenEstimator
from engine.execution import Executor
from engine.spec import CallContext
from infra.runtime import RedisResultCache, executor, redis_client
from registry.models import Tool
from registry.services import tool_save
from runs import leases as run_leases
from runs import services as runs
from runs import tasks as run_tasks
from runs.models import Message, Step, Task
from tests.support import extra_tools
from tests.support.clients import logged_in
from tests.support.replies import (
    Script,
    delay,
    error,
    hang,
    text,
    tool_call,
    tool_calls,
)
from tests.support.runs import ask, start
from tests.support.scripted_model import tool_messages, usage_for
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

AVAILABLE = "calculate, create_ticket, search_notes, send_email"


@pytest.fixture(autouse=True)
def clean_tools(flush_redis: None) -> Iterator[None]:
    extra_tools.reset()
    yield
    extra_tools.RELEASE.set()


def limit(agent: Any, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(agent, name, value)
    agent.save()


def steps_of(task: Task) -> list[Step]:
    return list(task.steps.order_by("seq"))


def tool_steps(task: Task) -> list[Step]:
    return [s for s in steps_of(task) if s.kind == "tool_call"]


def reply_of(task: Task) -> str:
    return Message.objects.get(task=task, role="assistant").content


def tool_contents(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in tool_messages(request)]


def calc(expression: str) -> Any:
    return tool_call("calculate", {"expression": expression})


# -- stop conditions -----------------------------------------------------------------


def calculating(alice: Any, demo: Any, model: Any, goal: str, **limits: Any):
    """Ask ``goal`` under these agent limits while the model keeps calculating.

    -> the task and the script.
    """
    limit(demo.agent, **limits)
    script = model(Script([calc(f"{i} + 1") for i in range(5)])).handler
    return ask(alice, demo.agent, goal), script


def test_max_steps_stops_the_task_and_tells_the_user(alice, demo, model):
    task, script = calculating(alice, demo, model, "count for ever", max_steps=2)

    assert (task.status, task.stop_reason) == ("stopped", "max_steps")
    assert len(script.requests) == 2
    assert [s.kind for s in steps_of(task)].count("model_call") == 2
    assert reply_of(task) == "Stopped: the run reached its limit of model steps."


def test_max_tool_calls_skips_the_calls_past_it_and_stops(alice, demo, model):
    limit(demo.agent, max_tool_calls=2)
    model(
        Script(
            [tool_calls([("calculate", {"expression": f"{i}+1"}) for i in range(3)])]
        )
    )

    task = ask(alice, demo.agent, "three sums at once")

    assert (task.status, task.stop_reason) == ("stopped", "max_tool_calls")
    assert [s.status for s in tool_steps(task)] == ["succeeded", "succeeded", "skipped"]
    assert tool_steps(task)[2].error_class == "max_tool_calls"


def test_a_repeated_call_is_answered_with_a_note_then_stops_the_task(
    alice, demo, model
):
    script = Script([calc("128 * 6 + 320")] * 3)
    model(script)

    task = ask(alice, demo.agent, "what is 128 * 6 + 320?")

    assert (task.status, task.stop_reason) == ("stopped", "repeated_call")
    steps = steps_of(task)
    assert [(s.kind, s.status) for s in steps] == [
        ("model_call", "succeeded"),
        ("tool_call", "succeeded"),
        ("model_call", "succeeded"),
        ("tool_call", "deduplicated"),
        ("note", "succeeded"),
        ("model_call", "succeeded"),
        ("tool_call", "skipped"),
    ]
    assert steps[3].result == steps[1].result
    assert "already called calculate" in steps[4].detail["text"]
    # The model was told inside the tool message, never in a user turn.
    assert "Change your plan or answer now" in tool_contents(script.requests[2])[-1]
    users = [m for m in script.requests[2]["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["what is 128 * 6 + 320?"]
    assert reply_of(task) == "Stopped: the model kept repeating the same call."


def test_three_failures_open_the_circuit_and_the_model_is_told(alice, demo, model):
    extra_tools.install("broken_lookup")
    lookups = [tool_call("broken_lookup", {"key": f"k{i}"}) for i in range(4)]
    script = Script([*lookups, text("The lookup service is down.")])
    model(script)

    task = ask(alice, demo.agent, "look things up")

    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    assert extra_tools.EXECUTIONS["broken_lookup"] == 3
    fourth = tool_steps(task)[3]
    assert (fourth.status, fourth.error_class) == ("skipped", "circuit_open")
    assert "unavailable for this task" in tool_contents(script.requests[4])[-1]


def test_tool_error_limit_stops_the_task(alice, demo, model):
    extra_tools.install("broken_lookup")
    limit(demo.agent, tool_error_limit=2)
    model(Script([tool_call("broken_lookup", {"key": f"k{i}"}) for i in range(3)]))

    task = ask(alice, demo.agent, "look things up")

    assert (task.status, task.stop_reason) == ("stopped", "tool_error_limit")
    assert extra_tools.EXECUTIONS["broken_lookup"] == 2
    assert reply_of(task) == "Stopped: too many tool errors in this run."


def test_the_time_budget_stops_a_task_whose_work_took_too_long(alice, demo, model):
    extra_tools.install("slow_lookup")
    limit(demo.agent, time_budget_s=1)
    script = Script([tool_call("slow_lookup", {"key": "a", "seconds": 1.2})] * 2)
    model(script)

    task = ask(alice, demo.agent, "slow work")

    assert (task.status, task.stop_reason) == ("stopped", "time_budget")
    assert len(script.requests) == 1
    assert task.active_seconds >= 1
    assert reply_of(task) == "Stopped: the run used up its time budget."


def test_a_task_parked_for_longer_than_its_budget_resumes_fine(
    alice, demo, operator, model
):
    from approvals.services import approval_decide

    limit(demo.agent, time_budget_s=5)
    email = {"to": "team@example.com", "subject": "Hi", "body": "Hello"}
    model(Script([tool_call("send_email", email), text("Sent.")]))
    task = ask(alice, demo.agent, "mail the team")
    assert task.status == "waiting_approval"
    # The approver answers two hours later.
    two_hours_ago = timezone.now() - timedelta(hours=2)
    Task.objects.filter(pk=task.pk).update(
        created_at=two_hours_ago, started_at=two_hours_ago, updated_at=two_hours_ago
    )
    approval_decide(approval=task.approvals.get(), user=operator, decision="approve")

    run_tasks.task_advance(task_id=task.pk)
    task.refresh_from_db()

    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    assert task.active_seconds < 5
    assert tool_steps(task)[0].status == "succeeded"


def test_the_token_budget_stops_the_task(alice, demo, model):
    task, script = calculating(alice, demo, model, "sum things", token_budget=60)

    assert (task.status, task.stop_reason) == ("stopped", "token_budget")
    assert task.total_tokens >= 60
    assert len(script.requests) == 1
    assert reply_of(task) == "Stopped: the run used up its token budget."


# -- cancel --------------------------------------------------------------------------


def test_cancel_abandons_an_in_flight_model_call_quickly(
    alice, demo, model, api_client_for
):
    server = model(Script([hang()]))
    task = start(alice, demo.agent, "think hard")
    outcome: list[str] = []

    def drive() -> None:
        try:
            outcome.append(run_tasks.task_advance(task_id=task.pk))
        finally:
            connection.close()

    worker = threading.Thread(target=drive)
    worker.start()
    wait_for(lambda: server.requests, 10)  # the model call is in flight

    started = time.monotonic()
    response = api_client_for(alice).post(f"/api/tasks/{task.pk}/cancel/")
    assert response.status_code == 202
    worker.join(10)
    elapsed = time.monotonic() - started

    assert not worker.is_alive() and elapsed < 5
    task.refresh_from_db()
    assert (task.status, task.stop_reason) == ("cancelled", "cancelled")
    assert outcome == ["finished"]
    assert not task.steps.filter(kind="model_call").exists()
    assert reply_of(task) == "Cancelled."


def test_cancel_of_a_running_task_is_for_its_owner_and_admins_only(
    alice, bob, operator, admin_user, demo, api_client_for
):
    task = start(alice, demo.agent, "hi")
    run_leases.task_claim(task_id=task.pk, owner="w1")  # running on some worker
    assert api_client_for(bob).post(f"/api/tasks/{task.pk}/cancel/").status_code == 404
    assert (
        api_client_for(operator).post(f"/api/tasks/{task.pk}/cancel/").status_code
        == 403
    )
    response = api_client_for(admin_user).post(f"/api/tasks/{task.pk}/cancel/")
    assert response.status_code == 202
    # The worker that holds the lease stops at its next step boundary.
    task.refresh_from_db()
    assert task.status == "running" and task.cancel_requested


def test_cancel_of_a_waiting_task_cancels_its_pending_approvals(
    alice, demo, model, api_client_for
):
    email = {"to": "team@example.com", "subject": "Hi", "body": "Hello"}
    model(Script([tool_call("send_email", email)]))
    task = ask(alice, demo.agent, "mail the team")
    assert task.status == "waiting_approval"

    assert (
        api_client_for(alice).post(f"/api/tasks/{task.pk}/cancel/").status_code == 202
    )

    task.refresh_from_db()
    assert (task.status, task.stop_reason) == ("cancelled", "cancelled")
    assert task.approvals.get().status == "cancelled"
    assert tool_steps(task)[0].status == "skipped"


# -- tools: timeout, retries, shaping, cache, rate limit ------------------------------


def test_a_hung_tool_is_abandoned_at_its_timeout_and_does_not_hold_the_task(
    alice, demo, model
):
    extra_tools.install("hang_lookup", timeout_s=0.3)
    model(Script([tool_call("hang_lookup", {"key": "a"}), text("It timed out.")]))

    started = time.monotonic()
    task = ask(alice, demo.agent, "look it up")
    elapsed = time.monotonic() - started

    assert elapsed < 5
    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    [step] = tool_steps(task)
    assert (step.status, step.error_class) == ("failed", "timeout")
    assert executor().abandoned >= 1


def test_a_write_that_times_out_waits_for_an_operator_to_say_whether_it_happened(
    alice, demo, model
):
    extra_tools.install("hang_lookup", timeout_s=0.3, risk="write")
    model(Script([tool_call("hang_lookup", {"key": "a"}), text("Checked.")]))

    task = ask(alice, demo.agent, "change it")

    # Abandoned mid-write, it may still take effect: not retried, not failed.
    assert task.status == "waiting_approval"
    [step] = tool_steps(task)
    assert (step.status, step.error_class) == ("waiting_approval", "outcome_unknown")
    assert "did not answer within" in step.error and step.attempts
    recovery = task.approvals.get()
    assert (recovery.kind, recovery.status) == ("recovery", "pending")
    assert extra_tools.EXECUTIONS.get("hang_lookup", 0) <= 1


def test_a_retry_safe_tool_is_retried_and_each_attempt_shows_in_the_step(
    alice, demo, model
):
    extra_tools.install("flaky_lookup", max_retries=2)
    model(Script([tool_call("flaky_lookup", {"key": "a"}), text("Got it.")]))

    task = ask(alice, demo.agent, "look it up")

    [step] = tool_steps(task)
    assert step.status == "succeeded"
    assert [a["error_class"] for a in step.attempts] == ["transient", "transient", None]
    assert extra_tools.EXECUTIONS["flaky_lookup"] == 3
    html = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert "3 attempts" in html
    assert "503 from upstream (try 1)" in html


def test_an_oversize_result_reaches_the_model_with_the_truncation_marker(
    alice, demo, model
):
    extra_tools.install("big_lookup", max_result_chars=300)
    script = Script([tool_call("big_lookup", {"key": "cache"}), text("ok")])
    model(script)

    ask(alice, demo.agent, "read the report")

    [content] = tool_contents(script.requests[1])
    assert "truncated by Agent Reach: 300 of" in content
    assert len(content) < 600


def test_result_fields_keep_only_the_fields_that_matter(alice, demo, model):
    extra_tools.install("count_lookup", result_fields=["/value"])
    script = Script([tool_call("count_lookup", {"key": "a"}), text("ok")])
    model(script)

    task = ask(alice, demo.agent, "look it up")

    assert tool_steps(task)[0].result == {"value": "value of a"}
    assert tool_contents(script.requests[1]) == ['{"value": "value of a"}']


def test_the_redis_result_cache_is_shared_keyed_by_version_and_expires(
    alice, demo, model
):
    tool = extra_tools.install("count_lookup", cache_ttl_s=300)
    model(Script([tool_call("count_lookup", {"key": "a"}), text("ok")] * 3))

    first = ask(alice, demo.agent, "look it up")
    second = ask(alice, demo.agent, "look it up again")

    assert tool_steps(first)[0].status == "succeeded"
    assert tool_steps(second)[0].status == "cached"
    assert tool_steps(second)[0].result == tool_steps(first)[0].result
    assert extra_tools.EXECUTIONS["count_lookup"] == 1
    key = executor().cache_key(tool.spec(), {"key": "a"})
    assert 0 < redis_client().ttl(key) <= 300
    # Another worker (another executor, another process's memory) sees it too.
    other = Executor(cache=RedisResultCache())
    context = CallContext("t", 1, "t:1:0", tool.spec(), time.monotonic() + 5)
    shared = other.run(tool.spec(), lambda a, c: 1 / 0, {"key": "a"}, context)
    assert shared.cached and shared.value == tool_steps(first)[0].result
    # A new version of the tool does not reuse the old version's results.
    tool.description = "Looks a key up, better."
    extra_tools.install("count_lookup", description=tool.description)
    third = ask(alice, demo.agent, "look it up once more")
    assert tool_steps(third)[0].status == "succeeded"
    assert extra_tools.EXECUTIONS["count_lookup"] == 2


def test_a_write_tool_is_never_cached(alice, demo, model):
    tool = Tool.objects.get(name="create_ticket")
    tool.cache_ttl_s = 300
    tool_save(tool=tool)
    ticket = {"title": "Cache", "body": "Do it"}
    model(Script([tool_call("create_ticket", ticket), text("ok")] * 2))
    ask(alice, demo.agent, "ticket")
    ask(alice, demo.agent, "ticket again")
    assert Ticket.objects.count() == 2
    assert not redis_client().keys("reach:cache:*")


def test_a_rate_limited_call_tells_the_model_to_wait(alice, demo, model):
    extra_tools.install("count_lookup", rate_limit_per_min=2)
    lookups = [("count_lookup", {"key": f"k{i}"}) for i in range(3)]
    script = Script([tool_calls(lookups), text("I will wait a minute.")])
    model(script)

    task = ask(alice, demo.agent, "three lookups")

    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    statuses = sorted(s.status for s in tool_steps(task))
    assert statuses == ["skipped", "succeeded", "succeeded"]
    limited = next(s for s in tool_steps(task) if s.status == "skipped")
    assert limited.error_class == "rate_limited"
    assert extra_tools.EXECUTIONS["count_lookup"] == 2
    assert any("Try again in about" in c for c in tool_contents(script.requests[1]))


# -- model errors --------------------------------------------------------------------


def test_429_and_5xx_are_retried_with_each_attempt_recorded(
    alice, demo, model, settings
):
    model(
        Script([error(429, "slow down", retry_after=0), error(503, "busy"), text("hi")])
    )
    settings.REACH_MODEL_MAX_RETRIES = 2

    task = ask(alice, demo.agent, "hello")

    assert (task.status, task.final_answer) == ("succeeded", "hi")
    [step] = steps_of(task)
    assert [a["error_class"] for a in step.attempts] == ["rate_limited", "server", None]


def test_a_model_call_that_times_out_is_retried(alice, demo, model, settings):
    model(Script([delay(3, text("too late")), text("in time")]))
    settings.REACH_MODEL_TIMEOUT_S = 0.5

    task = ask(alice, demo.agent, "hello")

    assert task.final_answer == "in time"
    [step] = steps_of(task)
    assert [a["error_class"] for a in step.attempts] == ["timeout", None]


def test_an_endpoint_that_stays_down_fails_the_task_with_an_actionable_message(
    alice, demo, model
):
    model(Script([error(503, "overloaded")] * 5))

    task = ask(alice, demo.agent, "hello")

    assert (task.status, task.stop_reason) == ("failed", "model_error")
    assert "answered 503" in task.error_message
    assert "check its logs and try again" in task.error_message
    [step] = steps_of(task)
    assert step.status == "failed" and len(step.attempts) == 2
    assert reply_of(task) == task.error_message


def test_malformed_tool_call_json_is_an_error_observation(alice, demo, model):
    script = Script([tool_call("calculate", '{"expression": "1 +'), text("Sorry.")])
    model(script)

    task = ask(alice, demo.agent, "add")

    [step] = tool_steps(task)
    assert (step.status, step.error_class) == ("failed", "invalid_json")
    assert step.raw_arguments == '{"expression": "1 +'
    assert '"error"' in tool_contents(script.requests[1])[0]
    assert task.status == "succeeded"


def test_an_unknown_tool_is_an_error_observation_listing_the_tools(alice, demo, model):
    script = Script([tool_call("search_web", {"q": "redis"}), text("Sorry.")])
    model(script)

    task = ask(alice, demo.agent, "search the web")

    [step] = tool_steps(task)
    assert step.error_class == "unknown_tool"
    assert AVAILABLE in tool_contents(script.requests[1])[0]


# -- context budget ------------------------------------------------------------------


def test_many_large_results_are_compacted_and_every_request_fits_the_window(
    alice, demo, model
):
    budget = 3000
    extra_tools.install("big_lookup", max_result_chars=8000)
    limit(demo.agent, context_budget_tokens=budget, max_steps=20)
    keys = [f"area{i}" for i in range(8)]
    script = Script(
        [tool_call("big_lookup", {"key": k}) for k in keys] + [text("1088")]
    )
    model(script)
    goal = "Read every area report and add up the budget expressions."

    task = ask(alice, demo.agent, goal)

    assert (task.status, task.final_answer) == ("succeeded", "1088")
    steps = steps_of(task)
    compactions = [s for s in steps if s.kind == "compaction"]
    assert compactions
    replaced = {int(seq) for c in compactions for seq in c.detail["replaced"]}
    assert replaced <= {s.seq for s in steps if s.kind == "tool_call"}
    system = task.agent_snapshot["instructions"]
    model_steps = [s for s in steps if s.kind == "model_call"]
    assert len(model_steps) == len(script.requests) == 9
    for request, step in zip(script.requests, model_steps, strict=True):
        messages = request["messages"]
        assert messages[0]["content"] == f"{system.strip()}\n\n{DATA_NOTICE}".strip()
        assert [m["content"] for m in messages if m["role"] == "user"] == [goal]
        # Under budget by the scripted server's own count ...
        assert usage_for(request, text(""))["prompt_tokens"] <= budget
        assert step.usage["prompt_tokens"] <= budget
        # ... and by the estimator, calibrated as the engine had it then.
        before = [s.record() for s in steps if s.seq < step.seq]
        estimator = TokenEstimator.calibrated(before)
        assert estimator.estimate(messages, request["tools"]) <= budget
    html = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert "to fit the context" in html


# -- stop reasons in the chat and the trace --------------------------------------------


def _max_steps(alice: Any, demo: Any, model: Any) -> Task:
    limit(demo.agent, max_steps=1)
    model(Script([calc("1+1")]))
    return ask(alice, demo.agent, "go")


def _repeated_call(alice: Any, demo: Any, model: Any) -> Task:
    model(Script([calc("1+1")] * 3))
    return ask(alice, demo.agent, "go")


def _token_budget(alice: Any, demo: Any, model: Any) -> Task:
    limit(demo.agent, token_budget=10)
    model(Script([calc("1+1")]))
    return ask(alice, demo.agent, "go")


def _tool_error_limit(alice: Any, demo: Any, model: Any) -> Task:
    limit(demo.agent, tool_error_limit=1)
    model(Script([calc("1 +")]))
    return ask(alice, demo.agent, "go")


def _max_tool_calls(alice: Any, demo: Any, model: Any) -> Task:
    limit(demo.agent, max_tool_calls=1)
    model(
        Script(
            [
                tool_calls(
                    [
                        ("calculate", {"expression": "1"}),
                        ("calculate", {"expression": "2"}),
                    ]
                )
            ]
        )
    )
    return ask(alice, demo.agent, "go")


def _model_error(alice: Any, demo: Any, model: Any) -> Task:
    model(Script([error(500, "boom")] * 3))
    return ask(alice, demo.agent, "go")


def _cancelled(alice: Any, demo: Any, model: Any) -> Task:
    task = start(alice, demo.agent, "go")
    runs.task_cancel(task=task, user=alice)
    task.refresh_from_db()
    return task


@pytest.mark.parametrize(
    ("run", "status", "reason", "bubble"),
    [
        (_max_steps, "stopped", "max_steps", "limit of model steps"),
        (_max_tool_calls, "stopped", "max_tool_calls", "limit of tool calls"),
        (_repeated_call, "stopped", "repeated_call", "repeating the same call"),
        (_token_budget, "stopped", "token_budget", "used up its token budget"),
        (_tool_error_limit, "stopped", "tool_error_limit", "too many tool errors"),
        (_model_error, "failed", "model_error", "The model server answered 500"),
        (_cancelled, "cancelled", "cancelled", "Cancelled."),
    ],
)
def test_every_stop_reason_shows_in_the_chat_and_the_trace(
    alice, demo, model, run, status, reason, bubble
):
    task = run(alice, demo, model)
    assert (task.status, task.stop_reason) == (status, reason)

    chat = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert f"stop reason: {reason}" in chat
    assert 'class="bubble assistant stopped"' in chat
    assert bubble in chat

    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert f'data-testid="stop-reason">{reason}</strong>' in trace

    payload = logged_in(alice).get(f"/api/tasks/{task.pk}/").json()
    assert (payload["status"], payload["stop_reason"]) == (status, reason)


def test_the_chat_page_offers_cancel_only_while_the_task_is_active(alice, demo):
    task = start(alice, demo.agent, "hi")
    page = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert f'data-cancel="{task.pk}"' in page
    runs.task_cancel(task=task, user=alice)
    page = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert f'data-cancel="{task.pk}"' not in page
