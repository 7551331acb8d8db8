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
    """After commit, push the committed state of these steps (and the task).

    ``rows`` (the Step rows exactly as written) and ``task_row`` (the Task as
    written, its agent and owner loaded) spare reading them back; each must be an
    object nobody changes after the commit.
    """

    def send() -> None:
        from agents.models import Step

        try:
            if rows is not None:
                steps = sorted(rows, key=lambda row: row.seq)
            else:
                steps = list(Step.objects.filter(pk__in=list(step_ids)).order_by("seq"))
            for step in steps:
                _send(task_group(task_id), step_event(step))
            if task and task_row is not None:
                _send(task_group(task_id), task_event(task_row))
            elif task:
                _push_task(task_id)
        except Exception:  # noqa: BLE001 - clients resume from the database
            log.warning("step push for task %s failed", task_id, exc_info=True)

    _after_commit(send)


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


def _push_task(task_id: Any) -> None:
    from agents.models import Task

    # Only what the payload shows: this runs after every committed step.
    task = (
        Task.objects.select_related("agent", "owner")
        .only(*TASK_EVENT_FIELDS)
        .filter(pk=task_id)
        .first()
    )
    if task is not None:
        _send(task_group(task_id), task_event(task))


def task_changed_on_commit(task_id: Any) -> None:
    def send() -> None:
        try:
            _push_task(task_id)
        except Exception:  # noqa: BLE001
            log.warning("task push for %s failed", task_id, exc_info=True)

    _after_commit(send)


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
