"""The run console: runs by state, workers and the queue; cancel, re-queue, retry.

Runs are real (the scripted model over HTTP, the real database and the bundled
Redis as the broker); a dead worker is a lease whose owner stopped extending it.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from audit.models import AuditEvent, AuditKind
from infra.runtime import redis_client
from runs import leases as run_leases
from runs.models import Task
from tests.support.cast import EMAIL
from tests.support.clients import logged_in
from tests.support.replies import Script, error, text, tool_call
from tests.support.runs import advance, ask, claimed, note_steps, start

pytestmark = pytest.mark.django_db(transaction=True)

DEAD = "deadhost:999:0badf00d"
ALIVE = "workerhost:42:cafe0001"


@pytest.fixture(autouse=True)
def clean_redis(flush_redis: None) -> None:
    """Every test starts with an empty broker and no worker heartbeats."""


def _ago(**delta: Any) -> dt.datetime:
    return timezone.now() - dt.timedelta(**delta)


def stuck_run(user: Any, agent: Any, content: str = "stuck") -> Task:
    """A run whose worker died: claimed, then its lease ran out."""
    task = start(user, agent, content)
    assert run_leases.task_claim(task_id=task.pk, owner=DEAD) is not None
    Task.objects.filter(pk=task.pk).update(lease_expires_at=_ago(minutes=5))
    return Task.objects.get(pk=task.pk)


def running_run(user: Any, agent: Any) -> Task:
    """A run a live worker drives, one step in."""
    journal = claimed(user, agent, "running", owner=ALIVE)
    journal.append(note_steps(1, 1))
    return Task.objects.get(pk=journal.task_id)


def queued_run(user: Any, agent: Any) -> Task:
    task = start(user, agent, "waiting for a worker")
    Task.objects.filter(pk=task.pk).update(created_at=_ago(minutes=3))
    return Task.objects.get(pk=task.pk)


def parked_run(user: Any, agent: Any) -> Task:
    task = ask(user, agent, "mail the report")
    assert task.status == "waiting_approval"
    return task


def failed_run(user: Any, agent: Any) -> Task:
    """Calculates, then the model endpoint refuses the next request."""
    task = ask(user, agent, "what is 1 + 1?")
    assert (task.status, task.stop_reason) == ("failed", "model_error")
    return task


def broker_messages() -> list[str]:
    return [raw.decode() for raw in redis_client().lrange("reach", 0, -1)]


def board_rows(response: Any) -> dict[str, str]:
    """Task id -> the state the board lists it in."""
    board = response.context["board"]
    return {
        str(row.task.pk): state
        for state, _heading, rows in board.sections
        for row in rows
    }


@pytest.fixture
def operator_client(operator: Any) -> Any:
    return logged_in(operator)


# -- permissions ---------------------------------------------------------------------


def test_a_plain_user_gets_403_on_the_console_and_its_actions(alice, demo):
    task = queued_run(alice, demo.agent)
    client = logged_in(alice)

    assert client.get("/console/").status_code == 403
    assert client.get("/console/board/").status_code == 403
    assert client.post("/console/cancel/", {"task": [task.pk]}).status_code == 403
    assert client.post(f"/console/tasks/{task.pk}/requeue/").status_code == 403
    retry = client.post(f"/console/tasks/{task.pk}/retry/", {"from_seq": 1})
    assert retry.status_code == 403
    assert Task.objects.get(pk=task.pk).status == "queued"
    assert b'href="/console/"' not in client.get("/").content


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get("/console/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_watcher_sees_the_board_but_cannot_act(alice, bob, demo):
    bob.user_permissions.add(Permission.objects.get(codename="view_console"))
    task = queued_run(alice, demo.agent)
    client = logged_in(bob)

    page = client.get("/console/")

    assert page.status_code == 200
    assert str(task.pk) in board_rows(page)
    assert b'data-testid="cancel"' not in page.content
    assert client.post("/console/cancel/", {"task": [task.pk]}).status_code == 403
    assert Task.objects.get(pk=task.pk).status == "queued"


def test_operators_see_the_console_link(operator_client):
    page = operator_client.get("/")
    assert b'href="/console/"' in page.content


# -- the board ----------------------------------------------------------------------


def test_the_board_shows_each_state_with_its_age_and_the_workers(
    alice, demo, model, operator_client
):
    model(
        Script(
            [
                tool_call("send_email", EMAIL),
                tool_call("calculate", {"expression": "1 + 1"}),
                error(400, "The model cannot take this request."),
            ]
        )
    )
    parked = parked_run(alice, demo.agent)
    failed = failed_run(alice, demo.agent)
    running = running_run(alice, demo.agent)
    stuck = stuck_run(alice, demo.agent)
    queued = queued_run(alice, demo.agent)
    fresh = start(alice, demo.agent, "just queued")
    redis_client().set("reach:worker:celery@workerhost", int(time.time()), ex=60)

    response = operator_client.get("/console/")

    assert response.status_code == 200
    rows = board_rows(response)
    assert rows[str(running.pk)] == "running"
    assert rows[str(stuck.pk)] == "stuck"
    assert rows[str(queued.pk)] == "queued"
    assert rows[str(parked.pk)] == "parked"
    assert rows[str(failed.pk)] == "failed"
    # Queued for less than a minute is not a problem yet.
    assert str(fresh.pk) not in rows
    board = response.context["board"]
    [running_row] = board.running
    assert running_row.lease_process == "workerhost:42"
    assert running_row.heartbeat_at is not None
    assert running_row.current is not None and running_row.current.label.startswith(
        "#1 note"
    )
    [parked_row] = board.parked
    assert parked_row.waiting_tool == "send_email"
    assert parked_row.expires_at is not None
    [stuck_row] = board.stuck
    assert stuck_row.since < _ago(minutes=4)
    [queued_row] = board.queued
    assert queued_row.since < _ago(minutes=2)
    # The failed run offers its calls to retry from, the last first.
    [failed_row] = board.failed
    assert [seq for seq, _ in failed_row.retry_from] == [3, 2, 1]
    # Workers: the one that beats, with the run leased on its host; the dead
    # worker's process, without a heartbeat, with its stuck run.
    workers = {w.name: w for w in board.workers}
    assert workers["celery@workerhost"].alive
    assert [r.task.pk for r in workers["celery@workerhost"].runs] == [running.pk]
    assert not workers["deadhost:999"].alive
    assert [r.task.pk for r in workers["deadhost:999"].runs] == [stuck.pk]
    # Every start so far enqueued one message on the broker.
    assert board.broker_depth == 6
    assert board.queued_total == 2
    html = response.content.decode()
    for task, state in [
        (running, "running"),
        (stuck, "stuck"),
        (queued, "queued"),
        (parked, "parked"),
        (failed, "failed"),
    ]:
        assert f'data-task="{task.pk}" data-state="{state}"' in html
    assert "min ago" in html
    assert "no heartbeat" in html


def test_the_board_refreshes_itself_from_a_partial_and_no_inline_script(
    alice, demo, operator_client
):
    page = operator_client.get("/console/")
    html = page.content.decode()
    assert 'src="/static/js/console.js"' in html
    assert "<script>" not in html and "onclick" not in html
    assert 'data-refresh="/console/board/"' in html

    task = queued_run(alice, demo.agent)
    partial = operator_client.get("/console/board/")

    assert partial.status_code == 200
    assert "<html" not in partial.content.decode()
    assert f'data-task="{task.pk}" data-state="queued"' in partial.content.decode()
    assert "no-cache" in partial["Cache-Control"]


# -- re-queue ------------------------------------------------------------------------


def test_a_stuck_run_is_re_queued_from_the_console_and_a_worker_finishes_it(
    alice, demo, model, operator, operator_client
):
    model(Script([text("Done after all.")]))
    task = stuck_run(alice, demo.agent)
    redis_client().flushdb()

    response = operator_client.post(f"/console/tasks/{task.pk}/requeue/")

    assert response.status_code == 302
    [message] = broker_messages()
    assert str(task.pk) in message
    event = AuditEvent.objects.get(kind=AuditKind.TASK_REQUEUED)
    assert (event.task_id, event.actor) == (str(task.pk), "operator")
    assert event.data["lease_owner"] == DEAD
    # What the worker that takes the message runs: it claims the run over the
    # dead worker's expired lease and finishes it.
    task = advance(task)
    assert (task.status, task.final_answer) == ("succeeded", "Done after all.")
    assert task.lease_epoch == 2


def test_a_run_a_live_worker_drives_is_not_re_queued(alice, demo, operator_client):
    task = running_run(alice, demo.agent)
    redis_client().flushdb()

    response = operator_client.post(f"/console/tasks/{task.pk}/requeue/", follow=True)

    assert "not stuck: nothing to re-queue" in response.content.decode()
    assert broker_messages() == []
    assert not AuditEvent.objects.filter(kind=AuditKind.TASK_REQUEUED).exists()


# -- cancel ---------------------------------------------------------------------------


def test_cancel_one_run_from_the_console(alice, demo, operator_client):
    task = queued_run(alice, demo.agent)

    response = operator_client.post(
        "/console/cancel/", {"task": [task.pk]}, follow=True
    )

    assert "Cancelled 1 run" in response.content.decode()
    task.refresh_from_db()
    assert (task.status, task.stop_reason) == ("cancelled", "cancelled")
    event = AuditEvent.objects.get(
        kind=AuditKind.TASK_CANCEL_REQUESTED, task_id=str(task.pk)
    )
    assert event.actor == "operator"


def test_bulk_cancel_stops_every_selected_run(alice, bob, demo, model, operator_client):
    model(Script([tool_call("send_email", EMAIL)]))
    parked = parked_run(alice, demo.agent)
    stuck = stuck_run(bob, demo.agent)
    queued = queued_run(bob, demo.agent)
    running = running_run(alice, demo.agent)
    left_alone = queued_run(alice, demo.agent)

    response = operator_client.post(
        "/console/cancel/",
        {"task": [parked.pk, stuck.pk, queued.pk, running.pk, "not-a-uuid"]},
        follow=True,
    )

    assert "Cancelled 4 runs" in response.content.decode()
    for task in (parked, stuck, queued):
        task.refresh_from_db()
        assert task.status == "cancelled"
    # A run a live worker drives stops at its next step boundary.
    running.refresh_from_db()
    assert (running.status, running.cancel_requested) == ("running", True)
    assert parked.approvals.get().status == "cancelled"
    left_alone.refresh_from_db()
    assert left_alone.status == "queued"
    assert (
        AuditEvent.objects.filter(
            kind=AuditKind.TASK_CANCEL_REQUESTED, actor="operator"
        ).count()
        == 4
    )


def test_cancelling_a_finished_run_says_so(alice, demo, model, operator_client):
    model(Script([text("hello")]))
    task = ask(alice, demo.agent, "hi")

    response = operator_client.post(
        "/console/cancel/", {"task": [task.pk]}, follow=True
    )

    assert "1 had already finished" in response.content.decode()
    assert Task.objects.get(pk=task.pk).status == "succeeded"


# -- retry ----------------------------------------------------------------------------


def test_a_failed_run_is_retried_from_step_n_in_the_same_conversation(
    alice, demo, model, operator_client
):
    script = Script(
        [
            tool_call("calculate", {"expression": "1 + 1"}),
            error(400, "The model cannot take this request."),
            text("1 + 1 = 2"),
        ]
    )
    model(script)
    failed = failed_run(alice, demo.agent)

    response = operator_client.post(
        f"/console/tasks/{failed.pk}/retry/", {"from_seq": 3}, follow=True
    )

    assert "Retrying run" in response.content.decode()
    retry = Task.objects.exclude(pk=failed.pk).get()
    assert retry.conversation_id == failed.conversation_id
    assert retry.owner == alice
    assert (retry.parent_id, retry.parent_seq) == (failed.pk, 3)
    copied = list(retry.steps.order_by("seq").values_list("seq", "kind", "tool"))
    assert copied == [(1, "model_call", None), (2, "tool_call", "calculate")]
    event = AuditEvent.objects.get(kind=AuditKind.TASK_RETRIED)
    assert (event.task_id, event.actor) == (str(retry.pk), "operator")
    assert event.data == {"parent": str(failed.pk), "from_seq": 3}

    retry = advance(retry)

    assert (retry.status, retry.final_answer) == ("succeeded", "1 + 1 = 2")
    # The calculation was copied, not run again: the model was asked once more.
    assert len(script.requests) == 3
    # The conversation shows the retried turn after the failed one.
    roles = list(
        failed.conversation.messages.order_by("created_at", "id").values_list(
            "role", "task"
        )
    )
    assert roles == [
        ("user", failed.pk),
        ("assistant", failed.pk),
        ("user", retry.pk),
        ("assistant", retry.pk),
    ]


def test_only_failed_runs_are_retried(alice, demo, operator_client):
    task = queued_run(alice, demo.agent)

    response = operator_client.post(
        f"/console/tasks/{task.pk}/retry/", {"from_seq": 1}, follow=True
    )

    assert "Only failed runs are retried" in response.content.decode()
    assert Task.objects.count() == 1


def test_a_retry_from_a_step_the_run_does_not_have_is_refused(
    alice, demo, model, operator_client
):
    model(
        Script(
            [
                tool_call("calculate", {"expression": "1 + 1"}),
                error(400, "The model cannot take this request."),
            ]
        )
    )
    failed = failed_run(alice, demo.agent)

    response = operator_client.post(
        f"/console/tasks/{failed.pk}/retry/", {"from_seq": 99}, follow=True
    )

    assert "The task has no step 99." in response.content.decode()
    assert Task.objects.count() == 1


def test_unknown_runs_are_404(operator_client):
    missing = "00000000-0000-0000-0000-000000000000"
    assert operator_client.post(f"/console/tasks/{missing}/requeue/").status_code == 404
