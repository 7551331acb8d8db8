"""What a client sends on a websocket, however malformed: an error frame back,
the socket still open and still live, never a crash (Channels' own decode drops
the connection with 1011 on text that is not JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from hypothesis import given
from hypothesis import strategies as st

from runs.consumers import MAX_FRAME_CHARS
from runs.models import Task
from tests.fuzz.strategies import fuzz_settings, json_values, text
from tests.support.runs import more_notes_async, with_notes_async
from tests.support.sockets import next_frame, queue_socket, task_socket

pytestmark = pytest.mark.django_db(transaction=True)

NAMED = [
    ("not json", "text"),
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ('{"type": "resume", "after": 1e400}', "after overflows"),
    ('{"type": "resume", "after": [1]}', "after of a wrong type"),
    ('{"type": "resume", "after": "x"}', "after not a number"),
    ("x" * (MAX_FRAME_CHARS + 1), "too long"),
    ("[]", "not an object"),
    ('{"type": "\\ud800"}', "a lone surrogate"),
]


async def still_live(comm: Any, run: Any) -> None:
    """After the bad frames: a new step still arrives on the socket."""
    await more_notes_async(run, 1)
    await next_frame(comm, lambda frame: frame["type"] == "step", timeout=5)


@pytest.mark.parametrize("frame,what", NAMED, ids=[what for _, what in NAMED])
async def test_a_bad_frame_gets_an_error_and_the_task_socket_stays_live(
    alice, demo, frame, what
):
    run = await with_notes_async(alice, demo.agent, 1)
    comm = task_socket(alice, run.task_id)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=frame)
    answer = await comm.receive_json_from(timeout=5)
    assert answer["type"] == "error" and answer["error"]
    await still_live(comm, run)
    await comm.disconnect()


@pytest.mark.parametrize("beyond", [1, 2, 10**30], ids=["rev+1", "rev+2", "huge"])
async def test_a_resume_past_the_tasks_rev_leaves_the_socket_live(alice, demo, beyond):
    """A client claiming more than exists gets the task, and the next step still
    arrives (its rev is beyond the task's, not beyond the claim)."""
    run = await with_notes_async(alice, demo.agent, 1)
    comm = task_socket(alice, run.task_id)
    assert (await comm.connect())[0]
    rev = await database_sync_to_async(
        lambda: Task.objects.values_list("rev", flat=True).get(pk=run.task_id)
    )()
    after = rev + beyond
    await comm.send_json_to({"type": "resume", "after": after})
    await next_frame(comm, lambda frame: frame["type"] == "task", timeout=5)
    await still_live(comm, run)
    await comm.disconnect()


async def test_a_binary_frame_gets_an_error_too(alice, demo):
    run = await with_notes_async(alice, demo.agent, 1)
    comm = task_socket(alice, run.task_id)
    assert (await comm.connect())[0]
    await comm.send_to(bytes_data=b"\x00\xff")
    answer = await comm.receive_json_from(timeout=5)
    assert answer["type"] == "error"
    await still_live(comm, run)
    await comm.disconnect()


async def test_the_approval_queue_answers_bad_frames_with_an_error(operator, demo):
    comm = queue_socket(operator)
    assert (await comm.connect())[0]
    for frame in ("not json", "[" * 50_000):
        await comm.send_to(text_data=frame)
        answer = await comm.receive_json_from(timeout=5)
        assert answer["type"] == "error"
    await comm.disconnect()


# (Channels' test client cannot send an empty text frame; the consumer answers one
# with an error like any other text that is not JSON.)
frames = st.one_of(
    text.map(str).filter(bool),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.fixed_dictionaries({"type": st.just("resume"), "after": json_values}).map(
        json.dumps
    ),
)


@fuzz_settings(40)
@given(batch=st.lists(frames, min_size=1, max_size=5))
def test_any_frames_leave_the_task_socket_answering_and_live(alice, demo, batch):
    async def run() -> None:
        run = await with_notes_async(alice, demo.agent, 1)
        comm = task_socket(alice, run.task_id)
        assert (await comm.connect())[0]
        for frame in batch:
            await comm.send_to(text_data=frame)
        # Every frame gets an answer or a resume's steps; nothing closes it.
        await still_live(comm, run)
        await comm.disconnect()

    async_to_sync(run)()
