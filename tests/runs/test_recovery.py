"""Recovery without a human: a database connection dropped under a run, and a
parked run whose enqueue after its decision was lost (the reaper's branch for
it). SQLite and PostgreSQL (dbsensitive); the dropped connection only on
PostgreSQL, where a server can drop one.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from approvals.services import approval_decide
from effects.models import Outbox
from runs import leases as run_leases
from runs import tasks as run_tasks
from runs.models import Task
from tests.support.cast import EMAIL
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, pending, start
from tests.support.waiting import in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]


def terminate_the_others() -> int:
    """``pg_terminate_backend`` of every other connection to the test database,
    from a connection of its own: what a failover or an admin does."""
    params = connection.settings_dict
    with psycopg.connect(
        dbname=params["NAME"],
        user=params["USER"],
        password=params["PASSWORD"] or None,
        host=params["HOST"] or None,
        port=params["PORT"] or None,
        autocommit=True,
    ) as own:
        rows = own.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (done,) in rows if done)


def test_a_run_whose_connection_is_dropped_mid_step_goes_on_from_its_last_step(
    alice, demo, model
):
    if connection.vendor != "postgresql":
        pytest.skip("an SQLite file has no server to drop a connection")
    terminated: list[int] = []

    def dropped_then(reply: Any) -> Any:
        def step(request: dict[str, Any]) -> Any:
            terminated.append(terminate_the_others())
            return reply

        return step

    script = model(
        Script(
            [
                tool_call("calculate", {"expression": "6*7"}),
                # The worker is waiting on the model: its connection goes now.
                dropped_then(text("42")),
                text("It is 42."),
            ]
        )
    ).handler
    task = start(alice, demo.agent, "what is 6*7?")

    assert run_tasks.task_advance(task_id=task.pk) == "database-lost"
    assert terminated and terminated[0] >= 1
    lost = Task.objects.get(pk=task.pk)
    # Not failed: released (its lease ends now) and enqueued again.
    assert (lost.status, lost.stop_reason) == ("running", None)
    assert not lost.error_message
    assert lost.lease_expires_at <= timezone.now()
    assert list(lost.steps.values_list("kind", flat=True).order_by("seq")) == [
        "model_call",
        "tool_call",
    ]

    done = advance(lost)

    assert (done.status, done.final_answer) == ("succeeded", "It is 42.")
    seqs = list(done.steps.values_list("seq", flat=True).order_by("seq"))
    assert seqs == list(range(1, len(seqs) + 1))
    [calculated] = done.steps.filter(kind="tool_call")
    assert calculated.result["result"] == 42
    # The reply the dropped worker never wrote was asked for again, once.
    assert len(script.requests) == 3


def idle_in_the_pool(count: int) -> None:
    """Leave ``count`` idle connections in the pool (each thread its own, all
    open at once, then handed back), as a worker's pool holds after a burst."""
    barrier = threading.Barrier(count)

    def hold(_: int) -> None:
        connection.ensure_connection()
        barrier.wait(10)
        connection.close()

    in_threads(hold, count, timeout=10)


def test_after_a_dropped_connection_the_pool_hands_out_a_live_one_first(caplog):
    """The server drops every connection, eight of them idle in the pool. The
    pool does not know: handed out one by one, each dead one fails its check and
    costs a backoff sleep (1, 2, 4, 8 s), so the next write (the one that ends a
    lost run's lease, or a heartbeat) would wait out the pool's 20 s and fail.
    recover_connections, which the worker and the heartbeat call when a
    connection is lost, has the pool test its idle ones at once."""
    if connection.vendor != "postgresql" or connection.pool is None:
        pytest.skip("a pool of PostgreSQL connections only")
    idle_in_the_pool(8)
    assert connection.pool.get_stats()["pool_available"] >= 8
    assert terminate_the_others() >= 8

    run_leases.recover_connections()
    caplog.set_level(logging.INFO, logger="psycopg.pool")
    assert Task.objects.count() == 0

    assert [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("connection failed check")
    ] == []


def test_a_parked_run_whose_enqueue_was_lost_is_requeued_exactly_once(
    alice, operator, demo, model, monkeypatch, settings
):
    model(Script([tool_call("send_email", EMAIL), text("Sent.")]))
    task = ask(alice, demo.agent, "Mail the report to ops")
    assert task.status == "waiting_approval"
    [approval] = pending(task)

    def lost(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the broker is down")

    # The decision commits; its enqueue of the run is lost (Redis down).
    monkeypatch.setattr(run_tasks.advance, "apply_async", lost)
    approval_decide(approval=approval, user=operator, decision="approve")
    parked = Task.objects.get(pk=task.pk)
    assert parked.status == "waiting_approval" and not pending(parked)

    sent: list[str] = []
    monkeypatch.setattr(
        run_tasks.advance, "apply_async", lambda args, **kw: sent.append(args[0])
    )
    # Within the grace the reaper leaves it be (its enqueue may be on its way).
    assert str(task.pk) not in run_tasks.tasks_reap()
    Task.objects.filter(pk=task.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.REACH_QUEUED_GRACE_S + 1)
    )

    first = run_tasks.tasks_reap()
    again = run_tasks.tasks_reap()  # the next tick, before a worker took it

    assert str(task.pk) in first and str(task.pk) not in again
    assert sent.count(str(task.pk)) == 1
    done = advance(parked)
    assert (done.status, done.final_answer) == ("succeeded", "Sent.")
    assert Outbox.objects.filter(to=EMAIL["to"]).count() == 1
