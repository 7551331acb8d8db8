"""Every feature pays for its step: the counted cost of a run, held to a budget.

One run of the demo agent through the real journal, runner and push path (the
scripted model over real HTTP, the real openai SDK, the bundled Redis): four
model calls, a read-only ``calculate``, a write (``create_ticket``), an
untrusted read (``search_notes``), then the answer. Counted, not timed, so the
figures repeat on a noisy machine (``tests/support/counting.py``):

- the worker: SQL statements per run and per step (one step: one model call and
  the call it proposed), those inside a transaction (the task's row held),
  transactions, Redis round trips and pushes, function calls on its thread;
- the web: what accepting the message costs (``POST .../messages/`` with a
  token, the throttle and the enqueue included), and what sending one step's
  frames to a watching socket costs (the consumer's handling of each message the
  worker pushed: a browser's, with the step's HTML, and a program's, without).

Twice: as seeded, and with what operators configure switched on (long-term
memory with items to give, routing by toolsets, a daily budget, a model price,
access lists on the agent and every tool).

The ceilings are in ``budget.toml`` beside this file. A change that needs more
raises the number there in the same commit and says why in the commit message.
``make budget`` prints the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tomllib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import Group
from django.db import connection

from registry.models import ModelPrice, Tool
from runs import services as runs
from runs.consumers import TaskConsumer
from runs.models import DailyBudget, Task
from tests.support.clients import bearer_client
from tests.support.counting import Counts, Meter, function_calls
from tests.support.memory import remembered
from tests.support.replies import Script, text, tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]

BUDGET_FILE = Path(__file__).with_name("budget.toml")
BUDGET: dict[str, dict[str, float]] = tomllib.loads(BUDGET_FILE.read_text())

#: The message; "budget" and "recall" are the keywords of the routing
#: configuration's toolsets (so its route offers both, memory's recall too).
MESSAGE = (
    "Recall how budgets are reported, work out the budget, open a ticket for it "
    "and look up the Redis notes."
)
MODEL_CALLS = 4


def script(runs: int) -> Script:
    """``runs`` runs' replies, one run after another."""
    return Script(
        [
            tool_call("calculate", {"expression": "128 * 6 + 320"}),
            tool_call("create_ticket", {"title": "Budget", "body": "1088 in all"}),
            tool_call("search_notes", {"keyword": "Redis"}),
            text("The budget is 1088; ticket opened."),
        ]
        * runs
    )


def configure(demo: Any) -> None:
    """Switch on what users configure: memory, routing, budgets, prices, access."""
    agent = demo.agent
    agent.tool_tags = [*agent.tool_tags, "memory"]
    agent.toolsets = [
        {"tag": "demo", "description": "notes and tickets", "keywords": ["budget"]},
        {"tag": "memory", "description": "what you remember", "keywords": ["recall"]},
    ]
    agent.save()
    for number in range(3):
        remembered(demo.alice, f"Budgets are reported in USD ({number}).", f"s{number}")
    DailyBudget.objects.create(user=None, max_cost_usd=100.0, max_tokens=10**8)
    ModelPrice.objects.create(
        pattern="scripted-*",
        input_usd_per_m=Decimal("1"),
        output_usd_per_m=Decimal("2"),
    )
    staff, _ = Group.objects.get_or_create(name="budget-users")
    demo.alice.groups.add(staff)
    agent.allowed_users.add(demo.alice)
    agent.allowed_groups.add(staff)
    for tool in Tool.objects.all():
        tool.allowed_users.add(demo.alice)
        tool.allowed_groups.add(staff)


class Run:
    """One measured run: its counts, and the messages its driver pushed."""

    def __init__(self, demo: Any) -> None:
        self.demo = demo
        self.client = bearer_client(demo.alice)

    def conversation(self) -> Any:
        return runs.conversation_create(owner=self.demo.alice, agent=self.demo.agent)

    def post(self, conversation: Any) -> str:
        """Post the message as a program does; return its task's id."""
        response = self.client.post(
            f"/api/conversations/{conversation.pk}/messages/",
            {"content": MESSAGE},
            format="json",
        )
        assert response.status_code == 202, response.content
        return str(response.json()["task"])


def succeeded(task_id: str) -> Task:
    done = Task.objects.get(pk=task_id)
    assert done.status == "succeeded", (done.status, done.error_message)
    assert done.steps.filter(kind="model_call").count() == MODEL_CALLS
    return done


def measured(demo: Any, model: Any) -> dict[str, Any]:
    """Warm up, then count: the message accepted, the run, the frames sent."""
    model(script(3))
    run = Run(demo)
    # Imports, caches, connections, templates.
    succeeded(advance(run.post(run.conversation())))

    web = Meter()
    conversations = run.conversation(), run.conversation()
    with web.counting():
        task_id = run.post(conversations[0])
    with pushes_awaited(), function_calls() as web_calls:
        queued = run.post(conversations[1])
    web.counts.function_calls = web_calls[0]

    worker = Meter()
    pushed: list[dict[str, Any]] = []
    submit = worker_push_recorder(pushed)
    with mock.patch("infra.push._Pusher.submit", submit), worker.counting():
        advance(task_id)
    with pushes_awaited(), function_calls() as worker_calls:
        advance(queued)
    worker.counts.function_calls = worker_calls[0]
    task = succeeded(task_id)
    succeeded(queued)

    # The consumer's first frames load and compile the step template.
    asyncio.run(consumer_calls(task, pushed, html=True))
    frames = {
        "browser": asyncio.run(consumer_calls(task, pushed, html=True)),
        "program": asyncio.run(consumer_calls(task, pushed, html=False)),
    }
    if os.environ.get("REACH_BUDGET_SQL"):
        for side, counts in (("web", web.counts), ("worker", worker.counts)):
            print(f"--- {side}: {counts.redis_by_thread}")
            print("\n".join(s[:150] for s in counts.statements))
            print("\n".join(counts.redis_commands))
    return {"web": web.counts, "worker": worker.counts, "frames": frames}


@contextlib.contextmanager
def pushes_awaited() -> Iterator[None]:
    """Wait, on leaving, for every push made inside to reach Redis, so none of
    them lands in the next count. (Its wrapper adds two function calls a push to
    a profiled pass: the same number every time.)"""
    from infra.push import _Pusher

    real = _Pusher.submit
    futures: list[Any] = []

    def submit(self: Any, group: str, message: dict[str, Any]) -> Any:
        futures.append(real(self, group, message))
        return futures[-1]

    with mock.patch.object(_Pusher, "submit", submit):
        yield
    for future in futures:
        future.result(timeout=10)


def advance(task_id: str) -> str:
    """What the ``advance`` Celery task runs (here, on this thread)."""
    runs.task_advance(task_id=task_id)
    return task_id


def worker_push_recorder(pushed: list[dict[str, Any]]) -> Any:
    """``_Pusher.submit`` that also keeps each message the driver pushed."""
    from infra.push import _Pusher

    real = _Pusher.submit

    def submit(self: Any, group: str, message: dict[str, Any]) -> Any:
        if "base" in message:
            pushed.append(message)
        return real(self, group, message)

    return submit


async def consumer_calls(
    task: Task, pushed: list[dict[str, Any]], *, html: bool
) -> dict[str, int]:
    """What a socket watching ``task`` spends on the driver's pushes: function
    calls, statements and frames, handled as Channels delivers them (through
    the consumer's ``dispatch``)."""
    sent: list[dict[str, Any]] = []

    async def base_send(message: dict[str, Any]) -> None:
        sent.append(message)

    consumer = TaskConsumer()
    consumer.scope = {"type": "websocket", "query_string": b"", "user": None}
    consumer.base_send = base_send
    consumer.task_id = str(task.pk)
    consumer.cursor = int(pushed[0]["base"])
    consumer.status_sent = "running"
    consumer.html = html
    consumer._sending = asyncio.Lock()
    meter = Meter()
    with meter.counting(), function_calls() as calls:
        for message in pushed:
            await consumer.dispatch(message)
    # Each message was sent on as it came: no read, no fallback.
    assert consumer.cursor == int(pushed[-1]["rev"])
    assert meter.counts.sql == 0
    steps = [
        frame["text"] for frame in sent if json.loads(frame["text"])["type"] == "step"
    ]
    assert steps and all(('"html"' in step) is html for step in steps)
    return {"function_calls": calls[0], "frames": len(sent), "sql": meter.counts.sql}


def per_step(counts: Counts) -> dict[str, float]:
    return counts.per(MODEL_CALLS)


def figures(found: dict[str, Any]) -> dict[str, float]:
    """The counts as the budget names them."""
    worker: Counts = found["worker"]
    web: Counts = found["web"]
    frames = found["frames"]
    return {
        "worker_sql_per_run": worker.sql,
        "worker_sql_per_step": per_step(worker)["sql"],
        "worker_sql_in_transactions_per_run": worker.sql_in_transactions,
        "worker_transactions_per_run": worker.transactions,
        "worker_redis_round_trips_per_run": worker.redis_round_trips,
        "worker_pushes_per_run": worker.pushes,
        "worker_pushes_per_step": per_step(worker)["pushes"],
        "worker_function_calls_per_run": worker.function_calls,
        "worker_function_calls_per_step": per_step(worker)["function_calls"],
        "web_accept_sql": web.sql,
        "web_accept_redis_round_trips": web.redis_round_trips,
        "web_accept_function_calls": web.function_calls,
        "web_frames_function_calls_per_step_browser": round(
            frames["browser"]["function_calls"] / MODEL_CALLS, 1
        ),
        "web_frames_function_calls_per_step_program": round(
            frames["program"]["function_calls"] / MODEL_CALLS, 1
        ),
        "web_frames_per_run": frames["program"]["frames"],
    }


def evidence(found: dict[str, Any]) -> dict[str, Any]:
    """What a failed check shows: the worker's and the web's Redis commands."""
    return {
        side: [c for c in found[side].redis_commands if "PUBLISH" not in c]
        for side in ("worker", "web")
    }


def budget_of(configuration: str) -> dict[str, float]:
    """The ceilings of ``configuration`` on this test run's database."""
    return {
        **BUDGET[configuration],
        **BUDGET.get(connection.vendor, {}).get(configuration, {}),
    }


def check(configuration: str, found: dict[str, float], why: Any = None) -> None:
    budget = budget_of(configuration)
    print(f"\n{configuration} ({MODEL_CALLS} model calls, 3 tool calls):")
    for name, value in found.items():
        print(f"  {name:48} {value:>12,.1f}  (budget {budget.get(name, 0):,.1f})")
    assert set(found) == set(budget), (
        f"budget.toml [{configuration}] names other counts: "
        f"missing {sorted(set(found) - set(budget))}, "
        f"unknown {sorted(set(budget) - set(found))}"
    )
    over = {
        name: (value, budget[name])
        for name, value in found.items()
        if value > budget[name]
    }
    assert not over, (
        f"[{configuration}] over budget (count, budget): {over}. A change that needs "
        "more raises tests/budget/budget.toml in the same commit and says why."
        f" What was counted: {why}"
    )


@pytest.fixture
def counted_settings(settings: Any) -> Any:
    # A control check just after the journal's own write answers from it when
    # the write is less than CONTROL_FRESH_S old; the loop's checks always come
    # just after a write (a model call that outlasts a poll reads on its own,
    # once a poll, whatever the step). Held open here, so the count does not
    # depend on whether this machine stalled 50 ms between the two.
    settings.REACH_MEMORY_IN_CONTEXT = True
    with mock.patch.object(runs, "CONTROL_FRESH_S", float("inf")):
        yield settings


def test_a_run_as_seeded_stays_within_its_counted_budget(
    demo, model, flush_redis, counted_settings
):
    found = measured(demo, model)
    check("seeded", figures(found), why=evidence(found))


def test_a_run_with_memory_routing_budgets_prices_and_access_lists_stays_within_it(
    demo, model, flush_redis, counted_settings
):
    configure(demo)
    found = measured(demo, model)
    worker: Counts = found["worker"]
    # The features are really on: the memory note is the run's first step and
    # the route was chosen by rule (no routing call: still four model calls).
    task = Task.objects.filter(owner=demo.alice).order_by("-created_at").first()
    assert task is not None and task.steps.filter(kind="note").exists()
    assert task.intent and task.cost_usd is not None
    assert worker.sql > 0
    check("configured", figures(found), why=evidence(found))


def test_the_budget_file_names_both_configurations():
    assert set(BUDGET) == {"seeded", "configured", "postgresql"}
    # What differs on PostgreSQL is the function calls, nothing else.
    for configuration, ceilings in BUDGET["postgresql"].items():
        assert configuration in BUDGET
        assert all("function_calls" in name for name in ceilings)
