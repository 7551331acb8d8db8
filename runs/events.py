"""Live updates: events sent to websocket groups after the transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db import transaction

from engine.redaction import Redactor
from infra.push import push, task_group
from infra.runtime import redactor
from runs.models import Step, Task
from runs.payloads import step_payload, task_payload, task_payload_rows
from runs.step_html import step_item


def _redactor() -> Redactor:
    return redactor()


def step_event(step: Any, *, redact: bool = True, html: bool = True) -> dict[str, Any]:
    """The websocket's step event; ``redact`` False for a row just stored (it was
    redacted on its way in, :func:`runs.steps.steps_insert`); ``html`` False
    for a client that draws no page (:func:`with_html` adds it later)."""
    payload = step_payload(step)
    if redact:
        payload = _redactor().data(payload)
    event = {"type": "step", "task": str(step.task_id), "step": payload}
    if html:
        event["html"] = render_step_html(step)
    return event


def render_step_html(step: Any) -> str:
    """The step's list item on the chat and trace pages: from a Step row, or from
    its payload with ``task_id`` (both carry the same names). What
    ``templates/runs/_step.html`` draws, without the template engine around it."""
    return str(step_item(step))


def wants_html(*, by_token: bool, asked: str | None) -> bool:
    """Whether a watcher's step events carry ``html``, the page's list item: a
    browser's session always (the chat and trace pages draw it); a program that
    came with a token only when its URL asks, ``?html=1`` (docs/api.md
    "Websockets"). The one rule of the task websocket and the event stream."""
    return not by_token or asked in ("1", "true", "yes")


def with_html(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with its ``html``, drawn from its own payload when the worker
    pushed it without (it draws no HTML: most runs have no page watching, and a
    program's socket asks for none). The payload is what the row holds, already
    redacted."""
    if "html" in event:
        return event
    return {
        **event,
        "html": render_step_html({**event["step"], "task_id": event["task"]}),
    }


def task_event(task: Any, *, redact: bool = True) -> dict[str, Any]:
    """The websocket's task event; ``redact`` False for a task its driver holds
    (what it shows of text, the goal, the answer and the error, is redacted where
    it is set)."""
    payload = task_payload(task)
    return {"type": "task", "task": _redactor().data(payload) if redact else payload}


def task_changed_on_commit(task_id: Any) -> None:
    """After commit, poke the task's watchers: something of it changed.

    The poke carries nothing: each websocket consumer sends its client every step
    changed since what it last sent (by ``rev``), then the task, from the
    database. Writers other than the run's driver (decisions, cancels, expiry,
    forks) poke; the driver pushes what it wrote (:func:`changes_on_commit`).
    """
    group = task_group(task_id)
    transaction.on_commit(lambda: push(group, POKE))


#: The message of a change whose content the watchers read from the database.
POKE = {"type": "reach.changed"}


def changes_on_commit(
    task: Any, steps: Sequence[Any], *, base: int, with_task: bool = False
) -> None:
    """After commit, push what one write of the run's driver changed.

    ``steps`` are the Step rows as written and ``task`` the task as it stands
    after the write (``task.rev`` current); ``base`` is the task's rev before the
    write, so the message covers every change in ``(base, task.rev]``: the steps'
    revs, and the task's own when ``with_task`` sends its event (a write that
    changed nothing but the task's rev sends it too). The events are built here,
    once per change, instead of by every watching consumer reading them back; a
    watcher that is not at ``base`` (it missed a message) reads from the
    database as after a poke.
    """
    events = [step_event(step, redact=False, html=False) for step in steps]
    message = {
        "type": "reach.changed",
        "base": base,
        "rev": task.rev,
        "steps": events,
        "task": task_event(task, redact=False) if with_task or not events else None,
    }
    group = task_group(task.pk)
    transaction.on_commit(lambda: push(group, message))


class Changes(NamedTuple):
    """What a watcher of one task has not seen yet (the consumer's side)."""

    #: Step events with ``rev`` above the watcher's cursor, in rev order.
    steps: list[dict[str, Any]]
    #: The task event, when the watcher needs it (else None).
    task: dict[str, Any] | None
    #: The rev the watcher has every change up to afterwards.
    cursor: int
    #: The task's status as of this read ("" once the task is gone).
    status: str


def changes_since(
    task_id: Any,
    after: int,
    *,
    status_sent: str = "",
    with_task: bool = False,
    html: bool = True,
) -> Changes:
    """Every step changed after ``after``, then the task event, when the task
    moved on since (its rev passed ``after`` or its status is no longer
    ``status_sent``) or ``with_task`` asks for it anyway; the step events with
    their HTML unless ``html`` is False.

    The task's rev is read first: every step change that committed before it has
    a rev no higher than the task's, and later ones get higher revs, so moving
    the cursor to the task's rev never skips a change. A poke for a change the
    watcher already has costs that one small read.
    """
    head = Task.objects.filter(pk=task_id).values_list("rev", "status").first()
    if head is None:
        return Changes([], None, after, "")
    rev, status = int(head[0]), str(head[1])
    # A client claiming more than exists (a resume past the task's rev) has
    # everything there is: from here its cursor is the rev, so the next change
    # still reaches it (and no number beyond the column's range is queried).
    after = min(after, rev)
    if rev <= after and not with_task and status == status_sent:
        return Changes([], None, after, status)
    steps = list(Step.objects.filter(task_id=task_id, rev__gt=after).order_by("rev"))
    cursor = max([after, rev, *(s.rev for s in steps)])
    task = load_task_event(task_id)
    if task is not None:
        status = str(task["task"]["status"])
    events = [step_event(step, html=html) for step in steps]
    return Changes(events, task, cursor, status)


def load_task_event(task_id: Any) -> dict[str, Any] | None:
    """The task event for ``task_id`` (the consumer's side)."""
    task = task_payload_rows().filter(pk=task_id).first()
    return task_event(task) if task is not None else None
