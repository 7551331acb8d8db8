"""A turn whose only call is a read: written with the model's reply, in one
transaction and one push, when the read finishes within the read window
(``REACH_READ_WINDOW_MS``); written as running when the window ends, then its
result, when it takes longer. Through the real runner, journal and push path.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError

from runs import events as notify
from runs.journal import DjangoJournal
from runs.models import Step
from tests.support import extra_tools
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, start

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def wide_window(settings):
    """A window no fast read misses, however busy the machine."""
    settings.REACH_READ_WINDOW_MS = 10_000


def pushed_steps(monkeypatch: Any) -> list[list[tuple[str | None, str]]]:
    """What the run's driver pushes: per message, its steps' (tool, status)."""
    messages: list[list[tuple[str | None, str]]] = []

    def push(group: str, message: dict[str, Any]) -> None:
        if "base" in message:
            messages.append(
                [(e["step"]["tool"], e["step"]["status"]) for e in message["steps"]]
            )

    monkeypatch.setattr(notify, "push", push)
    return messages


def test_a_read_done_within_the_window_is_written_with_its_reply_in_one_push(
    alice, demo, model, monkeypatch, wide_window
):
    model(Script([tool_call("calculate", {"expression": "6 * 7"}), text("42")]))
    messages = pushed_steps(monkeypatch)
    task = advance(start(alice, demo.agent, "what is 6 * 7?"))

    assert (task.status, task.final_answer) == ("succeeded", "42")
    # The reply and its finished call arrive together; no "running" frame.
    assert [(None, "succeeded"), ("calculate", "succeeded")] in messages
    assert ("calculate", "running") not in [s for m in messages for s in m]
    call = Step.objects.get(task=task, tool="calculate")
    assert call.result == {"expression": "6 * 7", "result": 42}
    assert call.started_at is not None and call.finished_at >= call.started_at
    # The model call, the read, then the answer: no gap, no copy.
    assert [s.seq for s in task.steps.order_by("seq")] == [1, 2, 3]


def test_with_no_window_the_reply_is_written_before_its_read_runs(
    alice, demo, model, monkeypatch, settings
):
    settings.REACH_READ_WINDOW_MS = 0
    model(Script([tool_call("calculate", {"expression": "6 * 7"}), text("42")]))
    messages = pushed_steps(monkeypatch)
    task = advance(start(alice, demo.agent, "what is 6 * 7?"))

    assert task.status == "succeeded"
    assert [(None, "succeeded"), ("calculate", "running")] in messages
    assert [("calculate", "succeeded")] in messages


def test_a_read_that_outlasts_the_window_shows_as_running_then_its_result(
    alice, demo, model, monkeypatch, settings
):
    settings.REACH_READ_WINDOW_MS = 50
    extra_tools.install("slow_lookup")
    model(
        Script(
            [
                tool_call("slow_lookup", {"key": "k", "seconds": 0.4}),
                text("done"),
            ]
        )
    )
    messages = pushed_steps(monkeypatch)
    task = advance(start(alice, demo.agent, "look k up"))

    assert task.status == "succeeded"
    running = messages.index([(None, "succeeded"), ("slow_lookup", "running")])
    finished = messages.index([("slow_lookup", "succeeded")])
    assert running < finished
    # The read ran once: its result is the one that was waited for.
    assert extra_tools.EXECUTIONS["slow_lookup"] == 1
    call = Step.objects.get(task=task, tool="slow_lookup")
    assert call.result == {"key": "k", "value": "slow value of k"}


def test_an_untrusted_read_written_with_its_reply_taints_the_task(
    alice, demo, model, monkeypatch, wide_window
):
    model(Script([tool_call("search_notes", {"keyword": "Redis"}), text("ok")]))
    tasks: list[dict[str, Any]] = []

    def push(group: str, message: dict[str, Any]) -> None:
        if message.get("task") and any(e["step"]["tool"] for e in message["steps"]):
            tasks.append(message["task"]["task"])

    monkeypatch.setattr(notify, "push", push)
    task = advance(start(alice, demo.agent, "which note mentions Redis?"))

    label = f"search_notes#2@{str(task.pk)[:8]}"
    assert task.tainted_by == [label]
    # The write that tainted it pushed the task as tainted.
    assert tasks and tasks[0]["tainted_by"] == [label]


def test_a_crash_before_the_turn_is_written_asks_the_model_again(
    alice, demo, model, monkeypatch, wide_window
):
    """The read ran but its turn was never written: nothing of it was shown or
    stored, and the run goes on from its last write as after any crash; the
    model is asked again and the read (safe to repeat) runs again."""
    extra_tools.reset()
    extra_tools.install("count_lookup")
    script = model(
        Script(
            [
                tool_call("count_lookup", {"key": "a"}),
                tool_call("count_lookup", {"key": "a"}),
                text("value of a"),
            ]
        )
    )
    real_append = DjangoJournal.append
    failed: list[bool] = []

    def append(self: DjangoJournal, steps: Any) -> Any:
        finished_read = any(s.tool and s.status.value == "succeeded" for s in steps)
        if finished_read and not failed:
            failed.append(True)
            raise OperationalError("the database went away")
        return real_append(self, steps)

    monkeypatch.setattr(DjangoJournal, "append", append)
    task = start(alice, demo.agent, "look a up")
    advance(task)  # loses its connection at the turn's write
    task = advance(task)  # the next claim goes on from what was written

    assert (task.status, task.final_answer) == ("succeeded", "value of a")
    assert len(script.requests) == 3
    assert extra_tools.EXECUTIONS["count_lookup"] == 2
    steps = [(s.seq, s.kind, s.tool) for s in task.steps.order_by("seq")]
    assert steps == [
        (1, "model_call", None),
        (2, "tool_call", "count_lookup"),
        (3, "model_call", None),
    ]
