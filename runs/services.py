"""Runs: the lifecycle services, starting and cancelling tasks.

:func:`task_start` records the user's message and a new task for it and enqueues
it after commit (:func:`runs.tasks.enqueue_advance`); the worker claims it and
drives it (:mod:`runs.tasks`, through :mod:`runs.leases`, :mod:`runs.journal`
and :mod:`runs.steps`). :func:`task_cancel` cancels one, finishing it here
(:mod:`runs.finish`) when nobody drives it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append, audit_task
from engine.pricing import snapshot_price
from engine.routing import ROUTING_KEY, Route
from engine.spec import FINAL_TASK_STATUSES, StopReason, TaskStatus
from infra import runtime
from infra.errors import ErrorKind, ServiceError
from registry.access import may_use_agent
from registry.adapters.outbound import internal_url_problem
from registry.models import AgentVersion
from registry.services import (
    agent_snapshot_of,
    snapshot_priced,
    snapshot_routed,
    version_resolve,
)
from runs import events as notify
from runs import ports

# The module, not its names: a patch of runs.tasks.enqueue_advance reaches
# task_start.
from runs import tasks as celery_tasks
from runs.budgets import DailyBudgetExceeded, budget_hold, budget_take
from runs.finish import _finish_task, message_add
from runs.models import Conversation, Message, QueuedMessage, Task
from runs.steps import steps_insert


class ConversationBusy(ServiceError):
    """A task of this conversation is still queued or running."""

    default_kind = ErrorKind.CONFLICT

    def __init__(self, task: Task, on_busy: str = "refuse") -> None:
        super().__init__(str(task.pk))
        self.task = task
        #: The conversation's choice (:class:`Conversation.OnBusy`).
        self.on_busy = on_busy


class ConversationReadOnly(ServiceError, ValueError):
    """The conversation holds an imported trace: a record, not a chat to go on.

    A ``ValueError`` still, for callers that treat every refusal of a message
    alike; the API tells it apart (a conflict: the conversation's state, not the
    message, is what refuses it).
    """

    default_kind = ErrorKind.CONFLICT


class TaskFinal(ServiceError):
    """The task already reached a final status."""

    default_kind = ErrorKind.CONFLICT


# -- starting --------------------------------------------------------------------


#: What ``Conversation.webhook_url`` (and a task's copy) holds at most.
WEBHOOK_URL_MAX_CHARS = 2000


class WebhookUrlInvalid(ServiceError):
    """A completion webhook URL that is not http(s), or reaches a private or
    loopback address ``REACH_INTERNAL_HOSTS`` does not list (the message says)."""


def webhook_url_checked(url: Any) -> str:
    """``url`` as a conversation stores it ("" for none); raises
    :class:`WebhookUrlInvalid` for one the SSRF rules of HTTP tools refuse."""
    if url is None or url == "":
        return ""
    if not isinstance(url, str):
        raise WebhookUrlInvalid("webhook_url is a URL (a string) or null.")
    text = url.strip()
    if len(text) > WEBHOOK_URL_MAX_CHARS:
        raise WebhookUrlInvalid(
            f"webhook_url is longer than {WEBHOOK_URL_MAX_CHARS} characters."
        )
    problem = internal_url_problem(text)
    if problem:
        raise WebhookUrlInvalid(f"webhook_url cannot be used: {problem}")
    return text


def conversation_create(
    *,
    owner: Any,
    agent: Any,
    on_busy: str | None = None,
    webhook_url: str = "",
) -> Conversation:
    """A new conversation; ``webhook_url`` (checked by the caller with
    :func:`webhook_url_checked`) gets each of its runs' outcome."""
    now = timezone.now()
    extra = {"on_busy": Conversation.OnBusy(on_busy)} if on_busy else {}
    return Conversation.objects.create(
        owner=owner,
        agent=agent,
        created_at=now,
        updated_at=now,
        webhook_url=webhook_url,
        **extra,
    )


def conversation_set_webhook(
    *, conversation: Conversation, webhook_url: str
) -> Conversation:
    """Post the outcome of ``conversation``'s runs to ``webhook_url`` (checked
    with :func:`webhook_url_checked`; "" for nowhere), from its run still going
    on too: that run reads its copy when it ends or parks."""
    with transaction.atomic():
        conversation.webhook_url = webhook_url
        Conversation.objects.filter(pk=conversation.pk).update(webhook_url=webhook_url)
        Task.objects.filter(conversation=conversation, status__in=Task.ACTIVE).update(
            webhook_url=webhook_url
        )
    return conversation


def conversation_set_on_busy(
    *, conversation: Conversation, on_busy: Any
) -> Conversation:
    """Choose what a message sent while a run of ``conversation`` goes on does."""
    conversation.on_busy = Conversation.OnBusy(on_busy)
    Conversation.objects.filter(pk=conversation.pk).update(on_busy=conversation.on_busy)
    return conversation


class _Turns(NamedTuple):
    """What a new message must know of the conversation's earlier runs."""

    #: The newest run still queued, running or waiting (its id), if any.
    active: Any
    #: Whether the conversation holds an imported trace (a record, read-only).
    imported: bool
    #: Taint sources of the earlier runs (they carry over), newest run first.
    taint: list[str]


def _turns(conversation: Conversation) -> _Turns:
    """The conversation's active run, whether it is an imported trace, and the
    taint its runs carry over: one query, of the runs that bear on any of them."""
    rows = conversation.tasks.filter(
        Q(status__in=Task.ACTIVE) | Q(origin__isnull=False) | ~Q(tainted_by=[])
    ).values_list("pk", "status", "origin", "tainted_by")
    active = None
    imported = False
    sources: list[str] = []
    for pk, status, origin, tainted in rows:
        if active is None and status in Task.ACTIVE:
            active = pk
        imported = imported or origin is not None
        for source in tainted or []:
            if source not in sources:
                sources.append(source)
    return _Turns(active, imported, sources)


def _locked(conversation: Conversation) -> Conversation:
    """``conversation`` read again under its row lock, keeping the owner and the
    agent the caller already loaded when the row still names them."""
    locked = Conversation.objects.select_for_update().get(pk=conversation.pk)
    for name in ("owner", "agent"):
        field = Conversation._meta.get_field(name)
        if field.is_cached(conversation) and getattr(locked, field.attname) == getattr(
            conversation, field.attname
        ):
            field.set_cached_value(locked, field.get_cached_value(conversation))
    return locked


@contextmanager
def _refusal_audited(user: Any) -> Iterator[None]:
    """Audit a refusal by the daily budget once the refused message's
    transaction has rolled back (outside it, the audit stays)."""
    try:
        yield
    except DailyBudgetExceeded as refused:
        audit_append(
            kind=AuditKind.BUDGET_DAILY_REFUSED,
            actor=user,
            object_type="user",
            object_id=user.get_username(),
            data=refused.status.as_json(),
        )
        raise


def task_start(
    *,
    conversation: Conversation,
    content: str,
    parent: Task | None = None,
    parent_seq: int | None = None,
    model: str | None = None,
    eval_case: dict[str, Any] | None = None,
    enforce_budget: bool = False,
    routed: bool = True,
    source: str = "",
    agent_version: AgentVersion | None = None,
) -> Task:
    """Record the user's message and a new task for it; enqueue it after commit.

    ``eval_case`` marks an evaluation run (see :mod:`engine.evaluation`).
    ``enforce_budget`` refuses the message with :class:`DailyBudgetExceeded`
    when the owner's daily budget is used up or held by their runs still going
    (a user's own message; forks, retries and evaluations are operators' and
    are not refused); it is checked and the new run's hold written in the
    transaction that accepts the message, under the owner's row lock. ``routed``
    False offers every tool whatever the agent's toolsets (a call that names
    its tool, as the MCP gateway's do). ``source`` names what started a run
    no one typed (``"schedule:<id>"``, ``"trigger:<id>"``). ``agent_version``
    runs that version of the agent (an evaluation's); by default the one
    labelled ``production``, else the newest (:mod:`registry.versions`).

    The run's price is read here, once, into its snapshot; so is its route
    when the agent's toolset rules pick one (:mod:`engine.routing`).
    """
    # What the user typed is recorded and sent to the model: secrets are not.
    content = runtime.redactor().text(content.strip())
    if not content:
        raise ValueError("The message is empty.")
    if len(content) > settings.REACH_MAX_MESSAGE_CHARS:
        raise ValueError(
            f"The message is longer than {settings.REACH_MAX_MESSAGE_CHARS} characters."
        )
    with _refusal_audited(conversation.owner), transaction.atomic():
        # Lock the conversation: one active task per conversation.
        conversation = _locked(conversation)
        turns = _turns(conversation)
        if turns.active is not None:
            # Before the budget: a message that waits behind a run (queue,
            # interrupt) holds nothing; it is checked when its run starts.
            raise ConversationBusy(
                Task.objects.get(pk=turns.active), on_busy=conversation.on_busy
            )
        if turns.imported:
            # An imported trace is a read-only record: nothing runs beside it.
            raise ConversationReadOnly(
                "This conversation holds an imported trace; it is read-only."
            )
        # Checked and held in this transaction: see runs.budgets.budget_take.
        budget = budget_take(user=conversation.owner) if enforce_budget else None
        now = timezone.now()
        version = agent_version or version_resolve(conversation.agent)
        snapshot = agent_snapshot_of(
            conversation.agent, user=conversation.owner, version=version
        )
        if model:
            snapshot = snapshot.replace(model=model)
        snapshot = snapshot_priced(snapshot)
        route: Route | None = None
        if routed:
            snapshot, route = snapshot_routed(snapshot, content)
        else:
            snapshot = snapshot.replace(
                extra={k: v for k, v in snapshot.extra.items() if k != ROUTING_KEY}
            )
        taint = turns.taint
        if parent is not None:
            for source in parent.tainted_by or []:
                if source not in taint:
                    taint.append(source)
        task = Task.objects.create(
            conversation=conversation,
            agent=conversation.agent,
            owner=conversation.owner,
            model=snapshot.model,
            goal=content,
            agent_snapshot=snapshot.to_json(),
            agent_version=version.number if version is not None else None,
            tainted_by=taint,
            inherited_taint=list(taint),
            parent=parent,
            parent_seq=parent_seq,
            eval_case=eval_case,
            # Unknown (null) for a model without a price: its steps add to null.
            cost_usd=0.0 if snapshot_price(snapshot.extra) is not None else None,
            intent=route.intent if route is not None else None,
            source=source,
            webhook_url=conversation.webhook_url,
            created_at=now,
            updated_at=now,
        )
        if budget is not None:
            budget_hold(
                task=task,
                status=budget,
                limits=snapshot.limits or conversation.agent.limits(),
                price=snapshot_price(snapshot.extra),
            )
        message_add(task=task, role=Message.Role.USER, content=content, at=now)
        memory = ports.memory_for()(task=task) if parent is None else None
        if memory is not None:
            # What is remembered goes first, as a step; a tainted item taints the
            # run from its start (as taint inherited from earlier turns does).
            if memory.tainted_by:
                task.tainted_by = list(dict.fromkeys([*taint, *memory.tainted_by]))
                task.inherited_taint = list(task.tainted_by)
                task.save(update_fields=["tainted_by", "inherited_taint"])
            # It tells the task's watchers after commit, as the start would.
            steps_insert(task=task, records=[memory])
        updates: dict[str, Any] = {"updated_at": now}
        if not conversation.title:
            updates["title"] = content[:80]
        Conversation.objects.filter(pk=conversation.pk).update(**updates)
        audit_task(
            AuditKind.TASK_STARTED,
            task_id=task.pk,
            actor=conversation.owner,
            data={"agent": conversation.agent.name, "model": task.model}
            | ({"intent": task.intent} if task.intent else {})
            | ({"agent_version": task.agent_version} if version else {}),
        )
        celery_tasks.enqueue_advance(task.pk)
        if memory is None:
            notify.task_changed_on_commit(task.pk)
    return task


# -- a message while a run goes on ------------------------------------------------


class Sent(NamedTuple):
    """What a message sent to a conversation became: a run, or a queued message."""

    task: Task | None = None
    queued: QueuedMessage | None = None


def message_send(
    *, conversation: Conversation, content: str, enforce_budget: bool = False
) -> Sent:
    """A user's message to ``conversation``: a new run, or, while a run goes on,
    what the conversation's ``on_busy`` says.

    ``queue`` stores it (:class:`QueuedMessage`) to start when the run ends;
    ``interrupt`` stores it too and cancels the run at its next step boundary
    (the new run gets both messages); ``refuse`` raises :class:`ConversationBusy`,
    as :func:`task_start` always does. A message to an idle conversation costs
    what :func:`task_start` costs: the busy case alone reads more.
    """
    try:
        return Sent(
            task=task_start(
                conversation=conversation,
                content=content,
                enforce_budget=enforce_budget,
            )
        )
    except ConversationBusy as busy:
        if busy.on_busy == Conversation.OnBusy.REFUSE:
            raise
    with transaction.atomic():
        locked = _locked(conversation)
        active = _turns(locked).active
        if active is not None:
            queued = _message_queue(
                conversation=locked,
                content=content,
                active=active,
                policy=Conversation.OnBusy(locked.on_busy),
            )
            if queued is not None:
                return Sent(queued=queued)
        # The run ended meanwhile: this message starts one now.
        return Sent(
            task=task_start(
                conversation=locked, content=content, enforce_budget=enforce_budget
            )
        )


def _message_queue(
    *,
    conversation: Conversation,
    content: str,
    active: Any,
    policy: Conversation.OnBusy,
) -> QueuedMessage | None:
    """Queue ``content`` behind the active run (under the conversation's lock);
    None when that run ended meanwhile (start it at once instead)."""
    content = runtime.redactor().text(content.strip())
    if not content:
        raise ValueError("The message is empty.")
    if len(content) > settings.REACH_MAX_MESSAGE_CHARS:
        raise ValueError(
            f"The message is longer than {settings.REACH_MAX_MESSAGE_CHARS} characters."
        )
    # Guarded by the run's status: a run whose finish commits first has read the
    # flag already, so it is not set on a run that will never look at it.
    if not Task.objects.filter(pk=active, status__in=Task.ACTIVE).update(
        followup_queued=True
    ):
        return None
    mode = QueuedMessage.Mode.QUEUE
    if policy == Conversation.OnBusy.INTERRUPT:
        mode = QueuedMessage.Mode.INTERRUPT
        goal = Task.objects.filter(pk=active).values_list("goal", flat=True).first()
        # The new run answers both: what was asked and what came after.
        content = f"{goal}\n\n{content}" if goal else content
    queued = QueuedMessage.objects.create(
        conversation=conversation, content=content, mode=mode, behind_id=active
    )
    if mode == QueuedMessage.Mode.INTERRUPT:
        # Idle now (queued, waiting for a human): it finishes here, and its
        # finish starts the message after commit; running: at its next step.
        task_cancel(task=Task(pk=active), user=conversation.owner)
    return queued


def queued_start_next(*, conversation_id: Any) -> Task | None:
    """Start the oldest queued message of the conversation when no run goes on.

    Exactly once: the message is claimed by a guarded UPDATE in the transaction
    that creates its run. A message that cannot start (the daily budget is used
    up, the agent is no longer usable, the conversation became read-only) is
    marked failed with the reason, and the next one is tried.
    """
    with transaction.atomic():
        conversation = (
            Conversation.objects.select_for_update()
            .select_related("owner", "agent")
            .filter(pk=conversation_id)
            .first()
        )
        if conversation is None:
            return None
        active = _turns(conversation).active
        if active is not None:
            # Another run started meanwhile: the message waits for that one.
            Task.objects.filter(pk=active, status__in=Task.ACTIVE).update(
                followup_queued=True
            )
            return None
        waiting = list(
            conversation.queued_messages.filter(state=QueuedMessage.State.QUEUED)
        )
        for index, queued in enumerate(waiting):
            claimed = QueuedMessage.objects.filter(
                pk=queued.pk, state=QueuedMessage.State.QUEUED
            ).update(state=QueuedMessage.State.STARTED, started_at=timezone.now())
            if not claimed:
                continue
            try:
                with transaction.atomic():
                    task = _queued_task(conversation, queued)
            except (ServiceError, ValueError) as refused:
                QueuedMessage.objects.filter(pk=queued.pk).update(
                    state=QueuedMessage.State.FAILED, error=str(refused)[:1000]
                )
                continue
            QueuedMessage.objects.filter(pk=queued.pk).update(task=task)
            if index + 1 < len(waiting):
                Task.objects.filter(pk=task.pk).update(followup_queued=True)
            return task
    return None


def _queued_task(conversation: Conversation, queued: QueuedMessage) -> Task:
    if not may_use_agent(conversation.owner, conversation.agent):
        raise ValueError(
            f"You may no longer use the agent '{conversation.agent.name}'."
        )
    return task_start(
        conversation=conversation, content=queued.content, enforce_budget=True
    )


# -- cancelling --------------------------------------------------------------------


def task_cancel(*, task: Task, user: Any) -> Task:
    """Cancel a task: at once when idle, at the next step boundary when running."""
    with transaction.atomic():
        task = Task.objects.select_for_update().get(pk=task.pk)
        if task.status in FINAL_TASK_STATUSES:
            raise TaskFinal()
        now = timezone.now()
        task.cancel_requested = True
        fields = ["cancel_requested", "updated_at"]
        if task.status in (TaskStatus.QUEUED, TaskStatus.WAITING_APPROVAL) or (
            task.lease_expires_at is not None and task.lease_expires_at < now
        ):
            # Nobody drives it now: finish here.
            ports.approvals().cancel_for_task(task=task, by=user)
            _finish_task(task, StopReason.CANCELLED, answer=None, message=None)
            fields += [
                "status",
                "stop_reason",
                "finished_at",
                "error_message",
                "lease_owner",
                "lease_expires_at",
                "rev",
            ]
        task.updated_at = now
        task.save(update_fields=fields)
        audit_task(
            AuditKind.TASK_CANCEL_REQUESTED,
            task_id=task.pk,
            actor=user,
        )
        notify.task_changed_on_commit(task.pk)
    return task


__all__ = [
    "ConversationBusy",
    "ConversationReadOnly",
    "Sent",
    "message_send",
    "queued_start_next",
    "TaskFinal",
    "conversation_create",
    "conversation_set_on_busy",
    "conversation_set_webhook",
    "WebhookUrlInvalid",
    "webhook_url_checked",
    "task_cancel",
    "task_start",
]
