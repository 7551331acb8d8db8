"""The reply being written reaches the task's watchers as ``delta`` events.

A real run (the worker's driver, in a thread) against the scripted model
streaming slowly over loopback; the task websocket and the event stream through
the product's consumers; the bundled Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from engine.model_client import ReplyDelta
from engine.redaction import Redactor
from engine.spec import DetailKey, ErrorClass, StepKind
from infra.runtime import redis_client
from runs import services as runs
from runs import streaming
from runs.models import Step, Task
from runs.streaming import LiveReply, delta_event, live_key, live_reply
from tests.support.clients import bearer_headers
from tests.support.replies import Script, broken_stream, slow_stream, text
from tests.support.runs import advance, start
from tests.support.sockets import task_socket
from tests.support.sse import AsgiStream, events_path
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Redis 的方案是「缓存改造」，预算表达式 128 * 6 + 320 的总和是 1088。" * 3
#: Characters of content per streamed chunk.
PIECE = 4


@pytest.fixture(autouse=True)
def _coalesced(settings: Any, flush_redis: None) -> None:
    settings.REACH_STREAM_COALESCE_MS = 50.0


def slow_model(model: Any, *replies: Any) -> Any:
    server = model(Script(list(replies)))
    server.stream_chunk_chars = PIECE
    return server


@database_sync_to_async
def started(user: Any, agent: Any) -> Task:
    return start(user, agent, "tell me")


def run_in_background(task: Task) -> asyncio.Future[Task]:
    return asyncio.ensure_future(sync_to_async(advance, thread_sensitive=False)(task))


async def frames_until_final(comm: Any) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not (
        frames
        and frames[-1]["type"] == "task"
        and frames[-1]["task"]["status"] in ("succeeded", "cancelled", "failed")
    ):
        frames.append(await comm.receive_json_from(timeout=20))
    return frames


def replayed(deltas: list[dict[str, Any]]) -> str:
    """The text a client shows after ``deltas``, as static/js/chat.js does."""
    shown = ""
    for delta in deltas:
        base = "" if delta["reset"] else shown[: delta["offset"]]
        shown = base + delta["text"]
    return shown


async def live_text_appears(task: Task) -> None:
    key = live_key(task.pk)
    for _ in range(400):
        if await asyncio.to_thread(redis_client().exists, key):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("no reply was ever live")


@database_sync_to_async
def model_steps(task: Task) -> list[Step]:
    return list(Step.objects.filter(task=task, kind=StepKind.MODEL_CALL))


async def test_the_socket_carries_coalesced_deltas_before_the_recorded_step(
    alice, demo, model
):
    slow_model(model, slow_stream(text(ANSWER), 0.01))
    task = await started(alice, demo.agent)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    runner = run_in_background(task)
    frames = await frames_until_final(comm)
    finished = await runner
    await comm.disconnect()

    assert finished.final_answer == ANSWER
    deltas = [f for f in frames if f["type"] == "delta"]
    chunks = -(-len(ANSWER) // PIECE)
    # Several pushes, each of many pieces: never one push per token.
    assert 2 <= len(deltas) < chunks / 2
    assert ANSWER.startswith(replayed(deltas)) and replayed(deltas)
    assert all(d["task"] == str(task.pk) and not d["reset"] for d in deltas)
    last_delta = max(i for i, f in enumerate(frames) if f["type"] == "delta")
    step_at = next(
        i
        for i, f in enumerate(frames)
        if f["type"] == "step" and f["step"]["kind"] == "model_call"
    )
    assert last_delta < step_at
    assert frames[step_at]["step"]["response"]["content"] == ANSWER
    # Not stored: the text so far is gone once the call ends.
    assert not redis_client().exists(live_key(task.pk))


async def test_the_event_stream_carries_delta_events_without_ids(alice, demo, model):
    slow_model(model, slow_stream(text(ANSWER), 0.01))
    task = await started(alice, demo.agent)
    headers = await database_sync_to_async(bearer_headers)(alice, name="sse")
    stream = AsgiStream(events_path(task.pk), headers)
    assert await stream.open() == 200
    runner = run_in_background(task)
    events = await stream.to_the_end(timeout=20)
    await runner

    deltas = [e for e in events if e.event == "delta"]
    assert len(deltas) >= 2 and all(e.id is None for e in deltas)
    assert ANSWER.startswith(replayed([e.data for e in deltas]))
    assert events[-1].event == "task"
    assert events[-1].data["task"]["final_answer"] == ANSWER


async def test_a_socket_that_connects_mid_reply_gets_the_text_so_far_then_the_rest(
    alice, demo, model
):
    slow_model(model, slow_stream(text(ANSWER), 0.02))
    task = await started(alice, demo.agent)
    runner = run_in_background(task)
    await live_text_appears(task)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    frames = await frames_until_final(comm)
    await runner
    await comm.disconnect()

    deltas = [f for f in frames if f["type"] == "delta"]
    first = deltas[0]
    assert first["reset"] and first["offset"] == 0 and first["text"]
    assert ANSWER.startswith(first["text"])
    assert len(deltas) > 1 and ANSWER.startswith(replayed(deltas))
    assert len(replayed(deltas)) > len(first["text"])


async def test_the_event_stream_that_connects_mid_reply_starts_from_the_text_so_far(
    alice, demo, model
):
    slow_model(model, slow_stream(text(ANSWER), 0.02))
    task = await started(alice, demo.agent)
    runner = run_in_background(task)
    await live_text_appears(task)
    headers = await database_sync_to_async(bearer_headers)(alice, name="sse")
    stream = AsgiStream(events_path(task.pk), headers)
    assert await stream.open() == 200
    events = await stream.to_the_end(timeout=20)
    await runner
    deltas = [e.data for e in events if e.event == "delta"]
    assert deltas[0]["reset"] and deltas[0]["text"]
    assert ANSWER.startswith(replayed(deltas))


async def test_a_cancel_mid_reply_records_what_was_written_as_cut(alice, demo, model):
    slow_model(model, slow_stream(text(ANSWER * 4), 0.02))
    task = await started(alice, demo.agent)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    runner = run_in_background(task)
    await live_text_appears(task)
    await database_sync_to_async(runs.task_cancel)(task=task, user=alice)
    frames = await frames_until_final(comm)
    finished = await runner
    await comm.disconnect()

    assert (finished.status, finished.stop_reason) == ("cancelled", "cancelled")
    [step] = await model_steps(task)
    assert step.status == "failed" and step.error_class == ErrorClass.CANCELLED
    assert step.detail[DetailKey.CUT] is True
    cut = step.response["content"]
    assert cut and (ANSWER * 4).startswith(cut) and len(cut) < len(ANSWER * 4)
    shown = replayed([f for f in frames if f["type"] == "delta"])
    assert cut.startswith(shown)
    assert not redis_client().exists(live_key(task.pk))


async def test_a_stream_broken_mid_reply_is_retried_and_the_watchers_start_over(
    alice, demo, model, settings
):
    settings.REACH_MODEL_MAX_RETRIES = 2
    slow_model(
        model,
        broken_stream(slow_stream(text("a first try " * 10), 0.02), 12),
        slow_stream(text(ANSWER), 0.01),
    )
    task = await started(alice, demo.agent)
    comm = task_socket(alice, str(task.pk))
    assert (await comm.connect())[0]
    runner = run_in_background(task)
    frames = await frames_until_final(comm)
    finished = await runner
    await comm.disconnect()

    assert finished.final_answer == ANSWER
    deltas = [f for f in frames if f["type"] == "delta"]
    assert any("first try" in d["text"] for d in deltas)
    resets = [i for i, d in enumerate(deltas) if d["reset"]]
    assert resets, deltas
    assert "first try" not in replayed(deltas)
    assert ANSWER.startswith(replayed(deltas))
    [step] = await model_steps(task)
    assert [a["error_class"] for a in step.attempts] == ["connection", None]


# -- the coalescing, piece by piece ------------------------------------------------


class Pushes:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append(message["delta"])


@pytest.fixture
def pushes(monkeypatch: Any) -> Pushes:
    recorder = Pushes()
    monkeypatch.setattr(streaming, "push", recorder)
    return recorder


def live(window_s: float, secrets: dict[str, str] | None = None) -> LiveReply:
    return LiveReply(
        "t-1", window_s=window_s, rev=lambda: 7, redactor=Redactor(secrets=secrets)
    )


def test_a_reply_done_within_its_first_window_costs_no_push_and_no_write(
    pushes: Pushes,
) -> None:
    reply = live(30.0)
    for piece in ("a", "b", "c"):
        reply.delta(ReplyDelta(piece))
    reply.ended()
    assert pushes.sent == []
    assert not redis_client().exists(live_key("t-1"))


def test_the_pieces_of_one_window_leave_in_one_push_and_one_write(
    pushes: Pushes,
) -> None:
    reply = live(0.05)
    for piece in ("Hel", "lo, ", "wor", "ld"):
        reply.delta(ReplyDelta(piece))
    wait_for(lambda: pushes.sent, 10, what="the window's push")
    [event] = pushes.sent
    assert event == delta_event(
        "t-1", rev=7, offset=0, text="Hello, world", tools=[], reset=False
    )
    assert live_reply("t-1", after=7) == delta_event(
        "t-1", rev=7, offset=0, text="Hello, world", tools=[], reset=True
    )
    assert live_reply("t-1", after=8) is None  # a watcher that has its step
    reply.delta(ReplyDelta("!", ("send_email",)))
    wait_for(lambda: len(pushes.sent) == 2, 10, what="the next window's push")
    assert pushes.sent[1]["offset"] == 12 and pushes.sent[1]["text"] == "!"
    assert pushes.sent[1]["tools"] == ["send_email"]
    reply.ended()
    assert not redis_client().exists(live_key("t-1"))


def test_what_is_pushed_is_redacted_and_a_retry_starts_over(pushes: Pushes) -> None:
    reply = live(0.05, secrets={"KEY": "sk-live-0123456789abcdef"})
    reply.delta(ReplyDelta("the key is sk-live-0123"))
    reply.delta(ReplyDelta("456789abcdef, keep it"))
    wait_for(lambda: pushes.sent, 10, what="the window's push")
    assert "0123" not in pushes.sent[0]["text"]
    reply.delta(ReplyDelta("", attempt=2, reset=True))
    reply.delta(ReplyDelta("fresh", attempt=2))
    wait_for(lambda: len(pushes.sent) == 2, 10, what="the retry's push")
    assert pushes.sent[1]["reset"] and pushes.sent[1]["text"] == "fresh"
    reply.ended()
