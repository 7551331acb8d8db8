"""The task websocket: who may connect, and resume after a rev."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from approvals.consumers import ApprovalsConsumer
from engine.spec import StepKind, StepRecord, StepStatus
from runs import services as runs
from runs.consumers import TaskConsumer

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def communicator(user, task_id, origin=ORIGIN):
    app = TaskConsumer.as_asgi()
    comm = WebsocketCommunicator(
        app, f"/ws/tasks/{task_id}/", headers=[origin] if origin else []
    )
    comm.scope["user"] = user
    comm.scope["url_route"] = {"kwargs": {"task_id": task_id}}
    return comm


@database_sync_to_async
def task_with_more_steps(task, count):
    from runs.models import Task

    row = Task.objects.get(pk=task.pk)
    journal = runs.DjangoJournal(row, owner=row.lease_owner, epoch=row.lease_epoch)
    start = row.steps.count() + 1
    journal.append(
        [
            StepRecord(
                seq=start + i,
                kind=StepKind.NOTE,
                status=StepStatus.SUCCEEDED,
                detail={"text": f"note {start + i - 1}"},
            )
            for i in range(count)
        ]
    )


@database_sync_to_async
def task_with_steps(user, agent, count=3):
    conversation = runs.conversation_create(owner=user, agent=agent)
    task = runs.task_start(conversation=conversation, content="hello")
    epoch = runs.task_claim(task_id=task.pk, owner="w")
    from runs.models import Task

    journal = runs.DjangoJournal(Task.objects.get(pk=task.pk), owner="w", epoch=epoch)
    journal.append(
        [
            StepRecord(
                seq=i + 1,
                kind=StepKind.NOTE,
                status=StepStatus.SUCCEEDED,
                detail={"text": f"note {i}"},
            )
            for i in range(count)
        ]
    )
    return task


async def test_the_owner_connects_and_resume_sends_every_step_after_the_rev(
    alice, demo
):
    task = await task_with_steps(alice, demo.agent)
    comm = communicator(alice, str(task.pk))
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "resume", "after": 0})
    seen = [await comm.receive_json_from(timeout=5) for _ in range(4)]
    steps = [m for m in seen if m["type"] == "step"]
    assert [m["step"]["seq"] for m in steps] == [1, 2, 3]
    assert all(m["task"] == str(task.pk) for m in steps)
    assert "note 0" in steps[0]["html"]
    assert seen[-1]["type"] == "task"
    after = steps[1]["step"]["rev"]
    await comm.send_json_to({"type": "resume", "after": after})
    again = await comm.receive_json_from(timeout=5)
    assert again["step"]["seq"] == 3
    await comm.disconnect()


async def test_bob_cannot_watch_alices_task(alice, bob, demo):
    task = await task_with_steps(alice, demo.agent)
    connected, _ = await communicator(bob, str(task.pk)).connect()
    assert not connected


async def test_the_auditor_can_watch_any_task(alice, operator, demo):
    task = await task_with_steps(alice, demo.agent)
    comm = communicator(operator, str(task.pk))
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect()


async def test_anonymous_users_and_foreign_origins_are_refused(alice, demo):
    task = await task_with_steps(alice, demo.agent)
    connected, _ = await communicator(AnonymousUser(), str(task.pk)).connect()
    assert not connected
    evil = (b"origin", b"http://evil.example.com")
    connected, _ = await communicator(alice, str(task.pk), origin=evil).connect()
    assert not connected
    connected, _ = await communicator(alice, str(task.pk), origin=None).connect()
    assert not connected


async def test_a_poke_sends_every_change_since_the_last_one_then_the_task(alice, demo):
    from asgiref.sync import sync_to_async

    from infra.push import push, task_group

    task = await task_with_steps(alice, demo.agent, count=1)
    comm = communicator(alice, str(task.pk))
    assert (await comm.connect())[0]
    await task_with_more_steps(task, count=2)

    await sync_to_async(
        lambda: push(task_group(task.pk), {"type": "reach.changed"}).result(5)
    )()
    first, second, last = [await comm.receive_json_from(timeout=5) for _ in range(3)]
    assert [m["step"]["seq"] for m in (first, second)] == [2, 3]
    assert first["step"]["rev"] < second["step"]["rev"]
    assert "note 1" in first["html"]
    assert last["type"] == "task" and last["task"]["rev"] >= second["step"]["rev"]
    # Nothing changed since: a second poke sends nothing.
    await sync_to_async(
        lambda: push(task_group(task.pk), {"type": "reach.changed"}).result(5)
    )()
    assert await comm.receive_nothing(timeout=0.5)
    await comm.disconnect()


async def test_only_approvers_connect_to_the_approval_queue(alice, operator, demo):
    for user, allowed in [(operator, True), (alice, False)]:
        comm = WebsocketCommunicator(
            ApprovalsConsumer.as_asgi(), "/ws/approvals/", headers=[ORIGIN]
        )
        comm.scope["user"] = user
        connected, _ = await comm.connect()
        assert connected is allowed
        if connected:
            await comm.disconnect()
