"""The task websocket: who may connect, and resume after a rev."""

from __future__ import annotations

import uuid

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from engine.spec import StepKind, StepRecord, StepStatus
from runs import services as runs
from runs.models import Task
from tests.support.runs import claimed
from tests.support.sockets import queue_socket, task_socket

pytestmark = pytest.mark.django_db(transaction=True)


def notes(first: int, count: int) -> list[StepRecord]:
    """``count`` note steps from seq ``first`` on, saying ``note <seq - 1>``."""
    return [
        StepRecord(
            seq=seq,
            kind=StepKind.NOTE,
            status=StepStatus.SUCCEEDED,
            detail={"text": f"note {seq - 1}"},
        )
        for seq in range(first, first + count)
    ]


@database_sync_to_async
def task_with_more_steps(task, count):
    row = Task.objects.get(pk=task.pk)
    journal = runs.DjangoJournal(row, owner=row.lease_owner, epoch=row.lease_epoch)
    journal.append(notes(row.steps.count() + 1, count))


@database_sync_to_async
def task_with_steps(user, agent, count=3):
    journal = claimed(user, agent, "hello")
    journal.append(notes(1, count))
    return Task.objects.get(pk=journal.task_id)


async def test_the_owner_connects_and_resume_sends_every_step_after_the_rev(
    alice, demo
):
    task = await task_with_steps(alice, demo.agent)
    comm = task_socket(alice, str(task.pk))
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
    connected, _ = await task_socket(bob, str(task.pk)).connect()
    assert not connected


async def test_the_auditor_can_watch_any_task(alice, operator, demo):
    task = await task_with_steps(alice, demo.agent)
    comm = task_socket(operator, str(task.pk))
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect()


async def test_anonymous_users_and_foreign_origins_are_refused(alice, demo):
    task = await task_with_steps(alice, demo.agent)
    connected, _ = await task_socket(AnonymousUser(), str(task.pk)).connect()
    assert not connected
    evil = (b"origin", b"http://evil.example.com")
    connected, _ = await task_socket(alice, str(task.pk), origin=evil).connect()
    assert not connected
    connected, _ = await task_socket(alice, str(task.pk), origin=None).connect()
    assert not connected


async def test_a_poke_sends_every_change_since_the_last_one_then_the_task(alice, demo):
    from asgiref.sync import sync_to_async

    from infra.push import push, task_group

    task = await task_with_steps(alice, demo.agent, count=1)
    comm = task_socket(alice, str(task.pk))
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


async def test_a_burst_of_pokes_sends_each_change_once_in_rev_order(alice, demo):
    from asgiref.sync import sync_to_async

    from infra.push import push, task_group

    task = await task_with_steps(alice, demo.agent, count=1)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    await task_with_more_steps(task, count=3)

    def burst() -> None:
        sent = [push(task_group(task.pk), {"type": "reach.changed"}) for _ in range(8)]
        for future in sent:
            future.result(5)

    await sync_to_async(burst)()
    received = []
    while not await comm.receive_nothing(timeout=0.5):
        received.append(await comm.receive_json_from(timeout=5))
    steps = [m for m in received if m["type"] == "step"]
    assert [m["step"]["seq"] for m in steps] == [2, 3, 4]
    revs = [m["step"]["rev"] for m in steps]
    assert revs == sorted(revs)
    # Eight pokes for one change: the coalesced reads send the task at most once
    # after the steps, never a step twice.
    tasks = [m for m in received if m["type"] == "task"]
    assert len(tasks) == 1 and received[-1]["type"] == "task"
    await comm.disconnect()


async def test_only_approvers_connect_to_the_approval_queue(alice, operator, demo):
    for user, allowed in [(operator, True), (alice, False)]:
        comm = queue_socket(user)
        connected, _ = await comm.connect()
        assert connected is allowed
        if connected:
            await comm.disconnect()


async def test_resume_of_a_task_purged_after_connect_closes_like_a_refused_task(
    alice, demo
):
    task = await task_with_steps(alice, demo.agent)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    refused = task_socket(alice, str(uuid.uuid4()))
    connected, refused_code = await refused.connect()
    assert not connected
    await database_sync_to_async(Task.objects.filter(pk=task.pk).delete)()

    await comm.send_json_to({"type": "resume", "after": 0})
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": refused_code}
    await comm.disconnect()


async def test_a_poke_for_a_task_purged_after_connect_closes_like_a_refused_task(
    alice, demo
):
    from asgiref.sync import sync_to_async

    from infra.push import push, task_group

    task = await task_with_steps(alice, demo.agent)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    await database_sync_to_async(Task.objects.filter(pk=task.pk).delete)()

    await sync_to_async(
        lambda: push(task_group(task.pk), {"type": "reach.changed"}).result(5)
    )()
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await comm.disconnect()
