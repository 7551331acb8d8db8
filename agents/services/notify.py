"""Live updates: events sent to websocket groups after the transaction commits."""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import transaction
from django.template.loader import render_to_string

from agents.engine.redaction import Redactor
from agents.push import APPROVALS_GROUP, push, task_group

log = logging.getLogger(__name__)


class _Dispatcher:
    """Runs after-commit notifications on one thread per process, in order.

    Loading, rendering and pushing a step costs milliseconds; a run must not wait
    for it between its steps. Notifications keep the order of their commits; a
    lost one (a process that dies) is recovered by the client's resume by rev.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Callable[[], None]] | None = None
        self._pid: int | None = None

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._queue is None or self._pid != os.getpid():
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(
                    target=self._run,
                    args=(self._queue,),
                    name="reach-notify",
                    daemon=True,
                ).start()
            jobs = self._queue
        jobs.put(job)

    @staticmethod
    def _run(jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        from django.db import connection

        while True:
            job = jobs.get()
            try:
                job()
            except Exception:  # noqa: BLE001 - clients resume from the database
                log.warning("notification failed", exc_info=True)
            if jobs.empty():
                # Hold no connection while idle (a pool or the server keeps it).
                connection.close()


_dispatcher = _Dispatcher()


def _after_commit(job: Callable[[], None]) -> None:
    transaction.on_commit(lambda: _dispatcher.submit(job))


def _redactor() -> Redactor:
    from agents.services.runtime import redactor

    return redactor()


def step_event(step: Any) -> dict[str, Any]:
    from agents.payloads import step_payload

    payload = _redactor().data(step_payload(step))
    return {
        "type": "step",
        "task": str(step.task_id),
        "step": payload,
        "html": render_step_html(step),
    }


def render_step_html(step: Any) -> str:
    return render_to_string("agents/_step.html", {"step": step})


def task_event(task: Any) -> dict[str, Any]:
    from agents.payloads import task_payload

    return {"type": "task", "task": _redactor().data(task_payload(task))}


def _send(group: str, event: dict[str, Any]) -> None:
    push(group, {"type": "reach.event", "event": event})


def steps_changed_on_commit(
    task_id: Any,
    step_ids: Sequence[int],
    *,
    task: bool = False,
    rows: Sequence[Any] | None = None,
    task_row: Any = None,
) -> None:
    """After commit, tell the task's watchers which steps (and the task) changed.

    The message carries ids only: each websocket consumer loads the committed
    state and renders it (payload and the shared step partial), so a run pays
    nothing for events nobody watches. ``rows`` may stand in for ``step_ids``;
    ``task_row`` is accepted for callers that have it and is not needed.
    """
    ids = [row.pk for row in rows] if rows is not None else list(step_ids)
    group = task_group(task_id)

    # One message for both: a push costs more than the few bytes it carries.
    message = {"type": "reach.steps", "ids": ids, "task": task}
    transaction.on_commit(lambda: push(group, message))


def task_changed_on_commit(task_id: Any) -> None:
    """After commit, tell the task's watchers that the task changed."""
    group = task_group(task_id)
    transaction.on_commit(lambda: push(group, {"type": "reach.task"}))


#: The columns task_payload reads (agents/payloads.py).
TASK_EVENT_FIELDS = (
    "id",
    "conversation_id",
    "agent__name",
    "owner__username",
    "model",
    "status",
    "stop_reason",
    "final_answer",
    "error_message",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "step_count",
    "parent_id",
    "parent_seq",
    "origin",
    "goal",
    "tainted_by",
    "rev",
    "created_at",
    "started_at",
    "finished_at",
)


def load_step_events(ids: Sequence[int]) -> list[dict[str, Any]]:
    """Step events for these step ids, in seq order (the consumer's side)."""
    from agents.models import Step

    steps = Step.objects.filter(pk__in=list(ids)).order_by("seq")
    return [step_event(step) for step in steps]


def load_task_event(task_id: Any) -> dict[str, Any] | None:
    """The task event for ``task_id`` (the consumer's side)."""
    from agents.models import Task

    task = (
        Task.objects.select_related("agent", "owner")
        .only(*TASK_EVENT_FIELDS)
        .filter(pk=task_id)
        .first()
    )
    return task_event(task) if task is not None else None


def approval_changed_on_commit(approval_id: Any) -> None:
    def send() -> None:
        from approvals.models import ApprovalRequest
        from approvals.payloads import approval_payload

        try:
            approval = (
                ApprovalRequest.objects.select_related(
                    "task__agent", "requested_by", "decided_by", "step"
                )
                .filter(pk=approval_id)
                .first()
            )
            if approval is None:
                return
            payload = _redactor().data(approval_payload(approval))
            html = render_to_string("approvals/_card.html", {"approval": approval})
            _send(
                APPROVALS_GROUP,
                {"type": "approval", "approval": payload, "html": html},
            )
        except Exception:  # noqa: BLE001
            log.warning("approval push for %s failed", approval_id, exc_info=True)

    _after_commit(send)
