"""``GET /api/tasks/{id}/events/`` in-process, through the real ASGI application:
the websocket's events with revs as ids, resume, the end, refusals, hang-ups."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from rest_framework.test import APIClient

from engine.spec import StepKind, StepRecord, StepStatus, StopReason
from infra.push import task_group
from runs import journal as run_journal
from runs.api import stream as sse
from runs.api.auth import token_issue, token_revoke
from runs.events import changes_since
from tests.support.clients import (
    bearer_client,
    bearer_headers,
    session_cookie,
    steps_of,
)
from tests.support.runs import (
    more_notes_async,
    start,
    user_in,
    with_notes_async,
)
from tests.support.sse import AsgiStream, SseEvent, events_path, subscribers
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def bearer(user: Any) -> dict[str, str]:
    return bearer_headers(user, name="sse")


@database_sync_to_async
def edit_note(journal: run_journal.DjangoJournal, seq: int) -> None:
    """Change step ``seq`` again, so it takes a new, higher rev."""
    journal.update(
        StepRecord(
            seq=seq,
            kind=StepKind.NOTE,
            status=StepStatus.SUCCEEDED,
            detail={"text": f"note {seq - 1}, edited"},
        )
    )


@database_sync_to_async
def finish(journal: run_journal.DjangoJournal) -> None:
    journal.finish(StopReason.FINAL_ANSWER, answer="done", message=None)


@database_sync_to_async
def websocket_view(task_id: str, html: bool = False) -> list[dict[str, Any]]:
    """What the task websocket sends a client that resumes after rev 0: a
    program's (a token's) socket, or with ``html`` a page's."""
    changes = changes_since(task_id, 0, with_task=True, html=html)
    assert changes.task is not None
    return [*changes.steps, changes.task]


@database_sync_to_async
def api_steps(user: Any, task_id: str) -> dict[int, dict[str, Any]]:
    """Every step's latest state, from ``GET /api/tasks/{id}/steps/``."""
    return {step["seq"]: step for step in steps_of(bearer_client(user), task_id)}


async def read_until_task(stream: AsgiStream, steps: int) -> list[SseEvent]:
    """Events until a task event that counts ``steps`` steps."""
    seen: list[SseEvent] = []
    while not (
        seen and seen[-1].event == "task" and seen[-1].data["task"]["steps"] >= steps
    ):
        batch = await stream.events(1)
        assert batch, f"the stream ended first, after {seen}"
        seen += batch
    return seen


async def test_a_finished_run_streams_the_websockets_events_with_revs_as_ids(
    alice, demo
):
    journal = await with_notes_async(alice, demo.agent, 3)
    await finish(journal)
    stream = AsgiStream(events_path(journal.task_id), await bearer(alice))

    assert await stream.open() == 200
    assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert stream.headers["cache-control"] == "no-cache"
    events = await stream.to_the_end()

    assert stream.ended
    assert [e.event for e in events] == ["step", "step", "step", "task"]
    websocket = await websocket_view(journal.task_id)
    assert [e.data for e in events] == websocket
    assert [e.rev for e in events] == [
        *(m["step"]["rev"] for m in websocket[:3]),
        websocket[3]["task"]["rev"],
    ]
    assert events[-1].data["task"]["status"] == "succeeded"


async def test_a_live_run_streams_each_change_and_ends_after_the_final_task_event(
    alice, demo
):
    journal = await with_notes_async(alice, demo.agent, 1)
    stream = AsgiStream(events_path(journal.task_id), await bearer(alice))
    assert await stream.open() == 200

    first = await read_until_task(stream, 1)
    assert [e.event for e in first] == ["step", "task"]
    assert first[-1].data["task"]["status"] == "running"
    await more_notes_async(journal, 2)
    live = await read_until_task(stream, 3)
    await finish(journal)
    rest = await stream.to_the_end()

    events = first + live + rest
    assert [e.data["step"]["seq"] for e in events if e.event == "step"] == [1, 2, 3]
    revs = [e.rev for e in events]
    assert revs == sorted(revs)
    assert [e.data["task"]["status"] for e in rest if e.event == "task"] == [
        "succeeded"
    ]
    assert rest[-1].event == "task" and stream.ended


async def test_a_resume_after_any_event_gets_every_later_event_exactly_once(
    alice, demo
):
    journal = await with_notes_async(alice, demo.agent, 4)
    await edit_note(journal, 2)  # Step 2 now comes last: events go in rev order.
    await finish(journal)
    headers = await bearer(alice)
    full_stream = AsgiStream(events_path(journal.task_id), headers)
    await full_stream.open()
    full = await full_stream.to_the_end()
    assert [e.data["step"]["seq"] for e in full if e.event == "step"] == [1, 3, 4, 2]

    for cut, last_seen in enumerate(full[:-1]):
        resumed = AsgiStream(
            events_path(journal.task_id), {**headers, "Last-Event-ID": last_seen.id}
        )
        assert await resumed.open() == 200
        assert await resumed.to_the_end() == full[cut + 1 :], f"cut after {cut}"
    # ?after= resumes the same way; Last-Event-ID (a reconnect's) wins over it.
    by_query = AsgiStream(events_path(journal.task_id, after=full[1].rev), headers)
    await by_query.open()
    assert await by_query.to_the_end() == full[2:]
    both = AsgiStream(
        events_path(journal.task_id, after=0), {**headers, "Last-Event-ID": full[2].id}
    )
    await both.open()
    assert await both.to_the_end() == full[3:]
    # At the final event there is nothing left: 204 stops an EventSource.
    done = AsgiStream(
        events_path(journal.task_id), {**headers, "Last-Event-ID": full[-1].id}
    )
    assert await done.open() == 204
    assert await done.to_the_end() == []


async def test_a_cut_live_stream_resumed_with_last_event_id_misses_and_repeats_nothing(
    alice, demo
):
    journal = await with_notes_async(alice, demo.agent, 2)
    headers = await bearer(alice)
    group = task_group(journal.task_id)
    cut = AsgiStream(events_path(journal.task_id), headers)
    await cut.open()
    before = await read_until_task(cut, 2)
    await sync_to_async(wait_for)(lambda: subscribers(group) == 1, 5)

    await cut.disconnect()
    # The hang-up ended the stream: it left the task's group.
    await sync_to_async(wait_for)(lambda: subscribers(group) == 0, 5)
    await more_notes_async(journal, 2)
    await edit_note(journal, 1)
    await finish(journal)
    resumed = AsgiStream(
        events_path(journal.task_id), {**headers, "Last-Event-ID": before[-1].id}
    )
    assert await resumed.open() == 200
    after = await resumed.to_the_end()

    assert all(e.rev > before[-1].rev for e in after)
    events = before + after
    keys = [(e.event, e.rev) for e in events]
    assert len(keys) == len(set(keys)) and keys == sorted(keys, key=lambda k: k[1])
    latest = {
        e.data["step"]["seq"]: e.data["step"] for e in events if e.event == "step"
    }
    assert latest == await api_steps(alice, journal.task_id)
    finals = [e for e in events if e.event == "task" and e.data["task"]["finished_at"]]
    assert finals == [events[-1]]


async def test_an_idle_stream_sends_keep_alive_comments(alice, demo, monkeypatch):
    monkeypatch.setattr(sse, "HEARTBEAT_S", 0.2)
    journal = await with_notes_async(alice, demo.agent, 1)
    stream = AsgiStream(events_path(journal.task_id), await bearer(alice))
    await stream.open()
    await read_until_task(stream, 1)

    assert await stream.comment(timeout=5) == "keep-alive"
    assert await stream.comment(timeout=5) == "keep-alive"
    await stream.disconnect()


async def test_revoking_the_token_ends_its_stream(alice, demo):
    journal = await with_notes_async(alice, demo.agent, 1)
    token, key = await database_sync_to_async(token_issue)(user=alice, name="sse")
    stream = AsgiStream(
        events_path(journal.task_id), {"Authorization": f"Bearer {key}"}
    )
    await stream.open()
    await read_until_task(stream, 1)

    await database_sync_to_async(token_revoke)(token=token)
    assert await stream.to_the_end(timeout=5) == []


async def test_a_stream_ends_at_the_keep_alive_after_its_reader_loses_the_right(
    alice, demo, monkeypatch
):
    monkeypatch.setattr(sse, "HEARTBEAT_S", 0.2)
    journal = await with_notes_async(alice, demo.agent, 1)
    carol = await database_sync_to_async(user_in)("auditors", "carol")
    stream = AsgiStream(events_path(journal.task_id), await bearer(carol))
    assert await stream.open() == 200
    await read_until_task(stream, 1)

    await database_sync_to_async(carol.groups.clear)()
    await stream.to_the_end(timeout=5)
    # Ended by the check that follows a keep-alive, not by the run.
    assert stream.parser.comments and set(stream.parser.comments) == {"keep-alive"}


async def test_a_browser_session_streams_too(alice, demo):
    journal = await with_notes_async(alice, demo.agent, 1)
    cookie = await database_sync_to_async(session_cookie)(alice)
    stream = AsgiStream(events_path(journal.task_id), {"Cookie": f"sessionid={cookie}"})
    assert await stream.open() == 200
    assert [e.event for e in await read_until_task(stream, 1)] == ["step", "task"]
    await stream.disconnect()


def test_others_get_404_no_token_401_and_a_bad_resume_point_400(alice, bob, demo):
    task = start(alice, demo.agent)
    path = events_path(task.pk)

    assert bearer_client(bob).get(path).status_code == 404
    anonymous = APIClient().get(path, HTTP_ACCEPT="text/event-stream")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == "Bearer"
    assert anonymous["Content-Type"].startswith("application/json")
    token, key = token_issue(user=alice)
    token_revoke(token=token)
    revoked = APIClient().get(path, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert revoked.status_code == 401
    for bad in ("-1", "seven"):
        answer = bearer_client(alice).get(path, HTTP_LAST_EVENT_ID=bad)
        assert answer.status_code == 400, bad
        assert "after" in answer.json()


async def test_a_token_gets_the_pages_html_only_when_it_asks_and_a_session_always(
    alice, demo
):
    journal = await with_notes_async(alice, demo.agent, 2)
    await finish(journal)
    token = await bearer(alice)
    cookie = await database_sync_to_async(session_cookie)(alice)
    for path, headers, html in (
        (events_path(journal.task_id), token, False),
        (events_path(journal.task_id) + "?html=1", token, True),
        (events_path(journal.task_id), {"Cookie": f"sessionid={cookie}"}, True),
    ):
        stream = AsgiStream(path, headers)
        assert await stream.open() == 200
        events = await stream.to_the_end()
        steps = [e.data for e in events if e.event == "step"]
        assert len(steps) == 2, path
        assert [("html" in s) for s in steps] == [html, html], (path, headers)
        assert [e.data for e in events] == await websocket_view(journal.task_id, html)
