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
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.db import connection

from infra import runtime
from runs import journal as run_journal
from runs.models import Task
from tests.support.counting import Counts, Meter, function_calls
from tests.support.demo_run import (
    MODEL_CALLS,
    Run,
    advance,
    check_frames,
    configure,
    deliver,
    script,
    succeeded,
    watching,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]

BUDGET_FILE = Path(__file__).with_name("budget.toml")
BUDGET: dict[str, dict[str, float]] = tomllib.loads(BUDGET_FILE.read_text())


def measured(demo: Any, model: Any) -> dict[str, Any]:
    """Warm up, then count: the message accepted, the run, the frames sent."""
    model(script(3))
    run = Run(demo)
    # Imports, caches, connections, templates; its pushes all sent before the
    # counts start (a busy machine's push loop lags behind the run).
    with pushes_awaited():
        succeeded(advance(run.post(run.conversation())))

    web = Meter()
    conversations = run.conversation(), run.conversation()
    with web.counting():
        task_id = run.post(conversations[0])
    with pushes_awaited(), function_calls() as web_calls:
        queued = run.post(conversations[1])
    web.counts.function_calls = web_calls[0]

    worker = Meter()
    with worker.counting():
        advance(task_id)
    # What the run's driver pushed (its writes' changes; pokes carry no base).
    pushed = [message for _, message in worker.counts.pushed if "base" in message]
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


async def consumer_calls(
    task: Task, pushed: list[dict[str, Any]], *, html: bool
) -> dict[str, int]:
    """What a socket watching ``task`` spends on the driver's pushes: function
    calls, statements and frames, handled as Channels delivers them."""
    consumer, sent = watching(task, pushed, html=html)
    meter = Meter()
    with meter.counting(), function_calls() as calls:
        await deliver(consumer, pushed)
    check_frames(consumer, pushed, sent, html)
    assert meter.counts.sql == 0  # each message sent on as it came: no read
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
    # The turn of a read that finishes within the read window is one write; held
    # wide, so a stall of this machine does not split a turn in two.
    settings.REACH_READ_WINDOW_MS = 10_000
    # A model call that outlasts the cancel poll reads the task's control row
    # once a poll: held wide too, so a slow moment of this machine (the scripted
    # model answering in more than half a second) is not counted as a query.
    settings.REACH_CANCEL_POLL_MS = 600_000
    # The redactor learns new stored secrets at most every REFRESH_S (one query
    # and its work, wherever a text is redacted next): the warm-up run's refresh
    # holds for the counted ones, however long this machine takes over them.
    with (
        mock.patch.object(run_journal, "CONTROL_FRESH_S", float("inf")),
        mock.patch.object(runtime._RefreshingRedactor, "REFRESH_S", 3600.0),
    ):
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
