"""The task websocket: who may connect, and resume after a rev."""

from __future__ import annotations

import contextlib
import json
import uuid
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from infra.push import push, task_group
from reach_site.asgi import application
from runs import events as notify
from runs import journal as run_journal
from runs.api.auth import token_issue, token_revoke
from runs.consumers import TaskConsumer
from runs.models import Task
from tests.support.cast import ORIGIN
from tests.support.runs import more_notes, with_notes
from tests.support.sockets import queue_socket, task_socket

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def task_with_more_steps(task, count, *, pushed=True):
    """``count`` more note steps by the run's driver; with ``pushed`` False its
    push is lost (as to a watcher that missed it), so only a poke or a later
    message tells the watchers."""
    row = Task.objects.get(pk=task.pk)
    journal = run_journal.DjangoJournal(
        row, owner=row.lease_owner, epoch=row.lease_epoch
    )
    with contextlib.ExitStack() as stack:
        if not pushed:
            stack.enter_context(mock.patch.object(notify, "push", lambda *a: None))
        more_notes(journal, count)


@database_sync_to_async
def task_with_steps(user, agent, count=3):
    return Task.objects.get(pk=with_notes(user, agent, count).task_id)


async def watched_task(user, agent, count=3):
    """A task with ``count`` steps, and ``user``'s socket on it (connected)."""
    task = await task_with_steps(user, agent, count=count)
    comm = task_socket(user, str(task.pk))
    assert (await comm.connect())[0]
    return task, comm


async def poke(task, message=None):
    """Push ``message`` (by default a bare "something changed") to the task."""
    message = message or {"type": "reach.changed"}
    await sync_to_async(lambda: push(task_group(task.pk), message).result(5))()


async def received_until_quiet(comm):
    """Every message the socket sends until it stays quiet for half a second."""
    received = []
    while not await comm.receive_nothing(timeout=0.5):
        received.append(await comm.receive_json_from(timeout=5))
    return received


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
    task, comm = await watched_task(alice, demo.agent, count=1)
    await task_with_more_steps(task, count=2, pushed=False)

    await poke(task)
    first, second, last = [await comm.receive_json_from(timeout=5) for _ in range(3)]
    assert [m["step"]["seq"] for m in (first, second)] == [2, 3]
    assert first["step"]["rev"] < second["step"]["rev"]
    assert "note 1" in first["html"]
    assert last["type"] == "task" and last["task"]["rev"] >= second["step"]["rev"]
    # Nothing changed since: a second poke sends nothing.
    await poke(task)
    assert await comm.receive_nothing(timeout=0.5)
    await comm.disconnect()


async def test_a_burst_of_pokes_sends_each_change_once_in_rev_order(alice, demo):
    task, comm = await watched_task(alice, demo.agent, count=1)
    await task_with_more_steps(task, count=3, pushed=False)

    def burst() -> None:
        sent = [push(task_group(task.pk), {"type": "reach.changed"}) for _ in range(8)]
        for future in sent:
            future.result(5)

    await sync_to_async(burst)()
    received = await received_until_quiet(comm)
    steps = [m for m in received if m["type"] == "step"]
    assert [m["step"]["seq"] for m in steps] == [2, 3, 4]
    revs = [m["step"]["rev"] for m in steps]
    assert revs == sorted(revs)
    # Eight pokes for one change: the coalesced reads send the task at most once
    # after the steps, never a step twice.
    tasks = [m for m in received if m["type"] == "task"]
    assert len(tasks) == 1 and received[-1]["type"] == "task"
    await comm.disconnect()


async def test_a_pushed_change_is_sent_as_pushed_without_reading_it_back(
    alice, demo, monkeypatch
):
    import runs.consumers as consumers

    task, comm = await watched_task(alice, demo.agent, count=1)
    reads: list[int] = []
    real = consumers.changes_since
    monkeypatch.setattr(
        consumers,
        "changes_since",
        lambda *a, **k: reads.append(1) or real(*a, **k),
    )
    await task_with_more_steps(task, count=2)
    first, second = [await comm.receive_json_from(timeout=5) for _ in range(2)]
    assert [m["step"]["seq"] for m in (first, second)] == [2, 3]
    assert "note 1" in first["html"]
    assert await comm.receive_nothing(timeout=0.3)
    assert reads == []
    await comm.disconnect()


async def test_a_pushed_change_goes_out_with_no_hop_to_the_sync_thread(
    alice, demo, monkeypatch
):
    from asgiref import sync

    task, comm = await watched_task(alice, demo.agent, count=1)
    hops: list[str] = []
    original = sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(self.func.__qualname__)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    await task_with_more_steps(task, count=2)
    received = [await comm.receive_json_from(timeout=5) for _ in range(2)]
    assert [m["step"]["seq"] for m in received] == [2, 3]
    # The write's own hop only: Channels' dispatch would add one per message
    # (close_old_connections) before the consumer's handler.
    assert hops == [task_with_more_steps.func.__qualname__], hops
    await comm.disconnect()


async def test_a_watcher_that_missed_a_push_reads_the_gap_and_sends_it_once(
    alice, demo
):
    task, comm = await watched_task(alice, demo.agent, count=1)
    await task_with_more_steps(task, count=2, pushed=False)
    # The next push starts after the lost one: the watcher reads what it lacks.
    await task_with_more_steps(task, count=1)
    received = await received_until_quiet(comm)
    steps = [m["step"]["seq"] for m in received if m["type"] == "step"]
    assert steps == [2, 3, 4]
    await comm.disconnect()


async def test_a_push_older_than_what_a_read_sent_is_not_sent_again(alice, demo):
    task, comm = await watched_task(alice, demo.agent, count=1)
    await task_with_more_steps(task, count=2, pushed=False)
    await comm.send_json_to({"type": "resume", "after": 0})
    await received_until_quiet(comm)
    row = await database_sync_to_async(Task.objects.get)(pk=task.pk)
    # A late copy of an early change: (base, rev] is behind what was sent.
    stale = {
        "type": "reach.changed",
        "base": row.rev - 2,
        "rev": row.rev - 1,
        "steps": [{"type": "step", "step": {"rev": row.rev - 1}}],
        "task": {"type": "task", "task": {"status": "queued"}},
    }
    await poke(task, stale)
    assert await comm.receive_nothing(timeout=0.5)
    await comm.disconnect()


async def test_after_on_the_url_sends_what_is_newer_on_connect_then_live_in_order(
    alice, demo
):
    task = await task_with_steps(alice, demo.agent, count=3)
    row = await database_sync_to_async(Task.objects.get)(pk=task.pk)
    first_rev = await database_sync_to_async(lambda: row.steps.get(seq=1).rev)()
    comm = task_socket(alice, f"{task.pk}", query=f"after={first_rev}")
    assert (await comm.connect())[0]
    await task_with_more_steps(task, count=1)
    received = await received_until_quiet(comm)
    steps = [m["step"] for m in received if m["type"] == "step"]
    assert [s["seq"] for s in steps] == [2, 3, 4]
    revs = [s["rev"] for s in steps]
    assert revs == sorted(revs) and len(set(revs)) == len(revs)
    # The client said what it has, so it gets the task as it stands too.
    assert any(m["type"] == "task" for m in received)
    await comm.disconnect()


async def test_a_live_task_is_read_again_when_a_push_was_lost(alice, demo, monkeypatch):
    monkeypatch.setattr(TaskConsumer, "RESYNC_S", 0.2)
    task, comm = await watched_task(alice, demo.agent, count=1)
    # Committed while Redis was down, say: no push, no poke reaches the socket.
    await task_with_more_steps(task, count=1, pushed=False)
    step = await comm.receive_json_from(timeout=5)
    assert step["type"] == "step" and step["step"]["seq"] == 2
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
    task, comm = await watched_task(alice, demo.agent)
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
    task, comm = await watched_task(alice, demo.agent)
    await database_sync_to_async(Task.objects.filter(pk=task.pk).delete)()

    await poke(task)
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await comm.disconnect()


@database_sync_to_async
def token_of(user):
    return token_issue(user=user, name="socket")


def bearer_task_socket(
    task_id: str, subprotocols: list[str], user=None, query: str = ""
) -> WebsocketCommunicator:
    """``/ws/tasks/<task_id>/[?query]`` offering ``subprotocols``, with no Origin
    header (as programs connect); ``user`` is what a cookie would have made the
    scope's."""
    return task_socket(
        user or AnonymousUser(),
        task_id,
        origin=None,
        query=query,
        subprotocols=subprotocols,
    )


async def test_a_bearer_subprotocol_opens_the_task_socket_and_is_echoed(alice, demo):
    task = await task_with_steps(alice, demo.agent)
    _, key = await token_of(alice)
    comm = bearer_task_socket(str(task.pk), ["bearer", key])

    connected, subprotocol = await comm.connect()
    assert connected and subprotocol == "bearer"
    await comm.send_json_to({"type": "resume", "after": 0})
    seen = [await comm.receive_json_from(timeout=5) for _ in range(4)]
    assert [m["type"] for m in seen] == ["step", "step", "step", "task"]
    await comm.disconnect()


async def test_a_bad_missing_or_foreign_token_is_refused_whatever_the_cookie(
    alice, bob, demo
):
    task = await task_with_steps(alice, demo.agent)
    _, bobs = await token_of(bob)
    revoked, revoked_key = await token_of(alice)
    await database_sync_to_async(token_revoke)(token=revoked)
    for offered in (
        ["bearer", "reach_not-a-token"],
        ["bearer"],
        ["bearer", revoked_key],
        # The token decides, not the session: bob's token with alice's cookie.
        ["bearer", bobs],
    ):
        comm = bearer_task_socket(str(task.pk), offered, user=alice)
        connected, code = await comm.connect()
        assert not connected and code == 4403, offered


async def test_a_token_socket_from_a_foreign_origin_is_refused_from_ours_it_opens(
    alice, operator, demo
):
    """docs/api.md: every socket from a foreign Origin is refused, a token socket too
    (programs send no Origin; a page that sends one must be ours)."""
    task = await task_with_steps(alice, demo.agent)
    _, alices = await token_of(alice)
    _, operators = await token_of(operator)
    evil = (b"origin", b"http://evil.example.com")
    for make in (
        lambda origin: task_socket(
            AnonymousUser(),
            str(task.pk),
            origin=origin,
            subprotocols=["bearer", alices],
        ),
        lambda origin: queue_socket(
            AnonymousUser(), origin=origin, subprotocols=["bearer", operators]
        ),
        lambda origin: WebsocketCommunicator(
            application,
            f"/ws/tasks/{task.pk}/",
            headers=[origin],
            subprotocols=["bearer", alices],
        ),
    ):
        connected, _ = await make(evil).connect()
        assert not connected
        ours = make(ORIGIN)
        assert await ours.connect() == (True, "bearer")
        await ours.disconnect()


async def test_through_the_asgi_stack_a_token_needs_no_origin_and_a_cookie_does(
    alice, demo
):
    task = await task_with_steps(alice, demo.agent)
    _, key = await token_of(alice)

    comm = WebsocketCommunicator(
        application, f"/ws/tasks/{task.pk}/", subprotocols=["bearer", key]
    )
    assert await comm.connect() == (True, "bearer")
    await comm.disconnect()
    # Without a token the Origin check runs before routing: no Origin, refused.
    plain = WebsocketCommunicator(application, f"/ws/tasks/{task.pk}/")
    connected, _ = await plain.connect()
    assert not connected


async def test_the_approval_queue_takes_an_approvers_token_only(alice, operator, demo):
    for user, allowed in [(operator, True), (alice, False)]:
        _, key = await token_of(user)
        comm = queue_socket(AnonymousUser(), origin=None, subprotocols=["bearer", key])
        connected, subprotocol = await comm.connect()
        assert connected is allowed
        if connected:
            assert subprotocol == "bearer"
            await comm.disconnect()


async def test_revoking_the_token_closes_its_sockets_but_not_the_sessions(alice, demo):
    task = await task_with_steps(alice, demo.agent)
    token, key = await token_of(alice)
    by_token = bearer_task_socket(str(task.pk), ["bearer", key])
    by_session = task_socket(alice, str(task.pk), origin=ORIGIN)
    assert (await by_token.connect())[0] and (await by_session.connect())[0]

    await database_sync_to_async(token_revoke)(token=token)
    closed = await by_token.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4401}
    assert await by_session.receive_nothing(timeout=0.5)
    await by_session.disconnect()


async def test_a_programs_socket_gets_api_events_without_html_unless_it_asks(
    alice, demo
):
    """A program's step events carry no page HTML (docs/api.md): its socket gets none,
    on resume (read) or live (pushed), unless its URL asks (``?html=1``)."""
    task = await task_with_steps(alice, demo.agent, count=1)
    _, key = await token_of(alice)
    for query, drawn in (("", False), ("html=1", True)):
        comm = bearer_task_socket(str(task.pk), ["bearer", key], query=query)
        assert (await comm.connect())[0]
        await comm.send_json_to({"type": "resume", "after": 0})
        read = await received_until_quiet(comm)
        await task_with_more_steps(task, count=1)
        live = await received_until_quiet(comm)
        steps = [m for m in read + live if m["type"] == "step"]
        assert len(steps) >= 2 and steps[-1]["step"]["detail"]["text"].startswith(
            "note"
        )
        assert [("html" in m) for m in steps] == [drawn] * len(steps), query
        if drawn:
            assert (
                f'id="step-{task.pk}-{steps[-1]["step"]["seq"]}"' in steps[-1]["html"]
            )
        await comm.disconnect()


@pytest.mark.parametrize(
    "content",
    [
        {"type": "step", "step": {"seq": 1, "html": "<li>缓存改造 \u2028 é</li>"}},
        {"type": "task", "task": {"usage": {"cost": 0.000125, "tokens": 12}}},
        # Beyond orjson: the stdlib encoder's answer, as before.
        {"type": "step", "step": {"detail": {"n": 2**70, 1: "int key"}}},
    ],
)
async def test_a_frame_is_the_same_json_with_non_ascii_kept(content) -> None:
    text = await TaskConsumer.encode_json(content)
    assert json.loads(text) == json.loads(json.dumps(content))
    assert "\\u" not in text  # 缓存改造 and é go as UTF-8, not escaped
