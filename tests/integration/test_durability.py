"""Durability for real: workers SIGKILLed mid-run, leases, the beat reaper, resume.

The integration tests start a real Celery worker subprocess (threads pool) and
beat on short lease settings, kill the worker with SIGKILL in the middle of a run,
start another, and check that the task completes with no tool executed twice: the
write (``create_ticket``, through the effect ledger) leaves one ``Ticket`` row,
and the read-only ``slow_lookup`` logs one ``done`` line per call. The others
check the Celery settings that make this work and the claim under concurrency.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from effects.models import Ticket, ToolExecution
from runs import leases as run_leases
from runs import tasks as run_tasks
from runs.models import Step, Task
from tests.support import extra_tools
from tests.support.replies import AnyReply, RecordingHandler, delay, text, tool_call
from tests.support.runs import start
from tests.support.scripted_model import ScriptedModel, tool_names_by_call_id
from tests.support.stack import Stack
from tests.support.waiting import in_threads, wait_for

TICKET = {"title": "Rotate the cache keys", "body": "Before Friday."}
SHORT_LEASES = {
    "REACH_LEASE_S": "3",
    "REACH_HEARTBEAT_S": "1",
    "REACH_REAPER_INTERVAL_S": "1",
    "REACH_QUEUED_GRACE_S": "2",
}


class Plan(RecordingHandler):
    """Ticket, then a slow lookup, then the answer; decided from the request alone.

    Stateless, so a worker that resumes and asks again gets the same decision.
    ``pause_after_ticket`` delays the model's reply that follows the ticket.
    """

    def __init__(self, *, lookup_seconds: float, pause_after_ticket: float) -> None:
        super().__init__()
        self.lookup_seconds = lookup_seconds
        self.pause_after_ticket = pause_after_ticket

    def respond(self, request: dict[str, Any]) -> AnyReply:
        messages = request["messages"]
        names = tool_names_by_call_id(messages)
        done = [names.get(m["tool_call_id"]) for m in messages if m["role"] == "tool"]
        if "create_ticket" not in done:
            return tool_call("create_ticket", TICKET)
        if "slow_lookup" not in done:
            arguments = {"key": "cache", "seconds": self.lookup_seconds}
            return delay(self.pause_after_ticket, tool_call("slow_lookup", arguments))
        return text("Ticket created and the cache looked up.")


@pytest.fixture
def durable(stack: Stack, tmp_path: Path) -> Iterator[tuple[Stack, Path]]:
    """The stack on short leases, with the test tools in every process."""
    log = tmp_path / "tool.log"
    log.touch()
    stack.env.update(SHORT_LEASES)
    stack.env["REACH_EXTRA_TOOL_MODULES"] = "tests.support.extra_tools"
    stack.env["REACH_TEST_TOOL_LOG"] = str(log)
    stack.env["REACH_MODEL_MAX_RETRIES"] = "0"
    extra_tools.install("slow_lookup", timeout_s=30)
    yield stack, log


def lines(log: Path, event: str, tool: str) -> list[str]:
    return [
        line
        for line in log.read_text().splitlines()
        if line.startswith(f"{event} {tool} ")
    ]


def run_and_kill(
    stack: Stack, alice: Any, demo: Any, plan: Plan, kill_when: Any
) -> tuple[Task, ScriptedModel]:
    server = ScriptedModel(plan).start()
    stack.env["OPENAI_BASE_URL"] = server.base_url
    stack.start_beat()
    first = stack.start_worker("worker-1", concurrency=4)
    task = start(alice, demo.agent, "ticket, then lookup")

    wait_for(kill_when, timeout=30)
    first.kill()  # SIGKILL: no cleanup, no ack, the lease just stops being renewed

    stack.start_worker("worker-2", concurrency=4)
    wait_for(
        lambda: Task.objects.get(pk=task.pk).is_final,
        timeout=60,
    )
    task.refresh_from_db()
    return task, server


def assert_nothing_ran_twice(task: Task, log: Path, plan: Plan) -> None:
    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    # The write went through the ledger once.
    assert Ticket.objects.count() == 1
    assert ToolExecution.objects.filter(tool="create_ticket").count() == 1
    # The read completed exactly once per call.
    done = lines(log, "done", "slow_lookup")
    assert len(done) == len(set(done)) == 1
    # The model was asked for the ticket once: the persisted reply was reused.
    first_moves = [
        r for r in plan.requests if not any(m["role"] == "tool" for m in r["messages"])
    ]
    assert len(first_moves) == 1
    steps = list(task.steps.order_by("seq"))
    assert [(s.kind, s.tool, s.status) for s in steps] == [
        ("model_call", None, "succeeded"),
        ("tool_call", "create_ticket", "succeeded"),
        ("model_call", None, "succeeded"),
        ("tool_call", "slow_lookup", "succeeded"),
        ("model_call", None, "succeeded"),
    ]
    assert task.lease_epoch >= 2  # a second worker took the run over


def while_the_lookup_runs(plan: Plan, log: Path) -> Callable[[], Any]:
    return lambda: lines(log, "start", "slow_lookup")


def after_the_ticket_step(plan: Plan, log: Path) -> Callable[[], Any]:
    def ticket_committed_and_model_asked() -> bool:
        committed = Step.objects.filter(tool="create_ticket", status="succeeded")
        return committed.exists() and len(plan.requests) >= 2

    return ticket_committed_and_model_asked


@pytest.mark.integration
@pytest.mark.parametrize(
    ("lookup_seconds", "pause_after_ticket", "kill_when", "lookups_started"),
    [
        # The cut-short read is started again (it is read-only, safe to retry).
        pytest.param(4, 0, while_the_lookup_runs, 2, id="while a tool runs"),
        # The run resumes from the last committed step.
        pytest.param(0.1, 5, after_the_ticket_step, 1, id="between two steps"),
    ],
)
def test_a_killed_worker_is_replaced_and_nothing_runs_twice(
    durable: tuple[Stack, Path],
    alice: Any,
    demo: Any,
    lookup_seconds: float,
    pause_after_ticket: float,
    kill_when: Callable[[Plan, Path], Callable[[], Any]],
    lookups_started: int,
) -> None:
    stack, log = durable
    plan = Plan(lookup_seconds=lookup_seconds, pause_after_ticket=pause_after_ticket)

    task, server = run_and_kill(stack, alice, demo, plan, kill_when(plan, log))
    try:
        assert_nothing_ran_twice(task, log, plan)
        assert len(lines(log, "start", "slow_lookup")) == lookups_started
    finally:
        server.stop()


# -- the settings and services that durability rests on -------------------------------


def test_celery_acks_late_rejects_on_worker_loss_prefetches_one_and_outlives_tasks():
    from django.conf import settings

    from reach_site.celery import app

    app.loader.import_default_modules()
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    options = conf.broker_transport_options
    assert options["visibility_timeout"] > conf.task_time_limit
    assert conf.task_time_limit == settings.REACH_TASK_HARD_LIMIT_S
    assert options["unacked_restore_throttle"] == 1
    advance = app.tasks["agents.advance"]
    assert advance.acks_late and advance.reject_on_worker_lost
    # kombu 5.7's Redis transport takes the options as channel attributes.
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        assert channel.visibility_timeout == options["visibility_timeout"]
        assert channel.unacked_restore_throttle == 1


def test_beat_runs_the_reaper_at_the_configured_interval(settings):
    from reach_site.celery import app

    app.loader.import_default_modules()
    app.finalize()
    schedule = {entry["task"]: entry for entry in app.conf.beat_schedule.values()}
    reap = schedule["agents.reap"]
    assert reap["schedule"] == settings.REACH_REAPER_INTERVAL_S


@pytest.mark.django_db(transaction=True)
@pytest.mark.dbsensitive
def test_the_reaper_requeues_expired_leases_and_lost_enqueues_only(alice, demo):
    def task(status: str, **fields: Any) -> Task:
        made = start(alice, demo.agent)
        Task.objects.filter(pk=made.pk).update(status=status, **fields)
        return made

    now = timezone.now()
    expired = task("running", lease_owner="dead", lease_expires_at=now - timedelta(1))
    alive = task("running", lease_owner="w", lease_expires_at=now + timedelta(hours=1))
    lost = task("queued", updated_at=now - timedelta(hours=1))
    fresh = task("queued", updated_at=now)
    done = task("succeeded", lease_expires_at=now - timedelta(1))

    reaped = set(run_tasks.tasks_reap())

    assert {str(expired.pk), str(lost.pk)} <= reaped
    assert not {str(alive.pk), str(fresh.pk), str(done.pk)} & reaped


@pytest.mark.django_db(transaction=True)
@pytest.mark.dbsensitive
def test_of_many_workers_claiming_one_task_at_once_exactly_one_wins(alice, demo):
    task = start(alice, demo.agent)
    together = threading.Barrier(8, timeout=10)
    epochs: list[int | None] = []
    lock = threading.Lock()

    def claim(number: int) -> None:
        close_old_connections()
        try:
            together.wait()
            epoch = run_leases.task_claim(task_id=task.pk, owner=f"w{number}")
            with lock:
                epochs.append(epoch)
        finally:
            connection.close()

    in_threads(claim, 8, timeout=20)

    assert len(epochs) == 8
    assert [e for e in epochs if e is not None] == [1]
    task.refresh_from_db()
    assert task.status == "running" and task.lease_epoch == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.dbsensitive
def test_a_heartbeat_keeps_the_lease_of_a_live_run_and_not_of_a_fenced_one(
    alice, demo, settings
):
    settings.REACH_HEARTBEAT_S = 0.05
    task = start(alice, demo.agent)
    epoch = run_leases.task_claim(task_id=task.pk, owner="w1")
    assert epoch is not None
    soon = timezone.now() + timedelta(seconds=1)
    Task.objects.filter(pk=task.pk).update(lease_expires_at=soon)
    beat = run_leases._Heartbeat()
    beat.add(str(task.pk), "w1", epoch)
    try:
        wait_for(
            lambda: (
                Task.objects.get(pk=task.pk).lease_expires_at
                > soon + timedelta(seconds=5)
            ),
            timeout=10,
        )
        # Another worker took over (epoch bumped): the old heartbeat must not extend.
        Task.objects.filter(pk=task.pk).update(
            lease_owner="w2", lease_epoch=epoch + 1, lease_expires_at=soon
        )
        # Proving that something does not happen takes time: ten heartbeat periods.
        time.sleep(0.5)
        assert Task.objects.get(pk=task.pk).lease_expires_at == soon
    finally:
        beat.remove(str(task.pk))


@pytest.mark.django_db(transaction=True)
@pytest.mark.dbsensitive
def test_a_beat_under_way_when_a_lease_is_released_does_not_extend_it(
    alice, demo, settings, monkeypatch
):
    """A worker that lost its database ends its lease so that the retry can claim
    at once; a beat that had already copied the run (and was waiting for a
    connection) must not write the lease back an interval ahead."""
    settings.REACH_HEARTBEAT_S = 0.01
    task = start(alice, demo.agent)
    epoch = run_leases.task_claim(task_id=task.pk, owner="w1")
    assert epoch is not None
    in_beat, go_on = threading.Event(), threading.Event()
    first = [True]

    def a_slow_connection() -> None:
        # The beat has copied its runs and waits here (as on an empty pool).
        if first[0]:
            first[0] = False
            in_beat.set()
            go_on.wait(10)
        close_old_connections()

    monkeypatch.setattr(run_leases, "close_old_connections", a_slow_connection)
    beat = run_leases._Heartbeat()
    beat.add(str(task.pk), "w1", epoch)
    assert in_beat.wait(10)
    released = threading.Event()

    def release() -> None:
        # What task_advance does when its connection is lost.
        beat.release(str(task.pk))
        Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now())
        released.set()
        connection.close()

    releaser = threading.Thread(target=release)
    releaser.start()
    # Not a timing assertion: without the wait in release() the lease's end is
    # written within this half second and the beat then overwrote it.
    released.wait(0.5)
    go_on.set()
    releaser.join(10)
    assert released.is_set()
    # The beat has ended (release waited for it); nothing extends the lease now.
    assert Task.objects.get(pk=task.pk).lease_expires_at <= timezone.now()
