"""Reads that pages, the API and the websocket share: what a user may see.

Each returns what its callers show with the related rows they need, so that
none of them filters ownership (or joins) on its own; and the list pages' filters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from audit.permissions import can_audit
from registry.access import usable_agents
from registry.models import Agent
from runs.models import Conversation, Task
from runs.payloads import task_payload_rows


def own_conversations(user: Any) -> QuerySet[Conversation]:
    """The user's own conversations, with their agent (evaluations' aside: their
    runs are read on the eval and trace pages)."""
    return Conversation.objects.filter(owner=user, is_eval=False).select_related(
        "agent"
    )


def own_conversation(user: Any, conversation_id: Any) -> Conversation | None:
    """The user's conversation ``conversation_id``; None for anyone else's."""
    conversation = own_conversations(user).filter(pk=conversation_id).first()
    if conversation is not None:
        conversation.owner = user  # it is, by the filter: no second read of it
    return conversation


def own_tasks(user: Any) -> QuerySet[Task]:
    """The user's own tasks, with only what their payload shows (the API's list)."""
    return task_payload_rows().filter(owner=user)


def visible_tasks(user: Any) -> QuerySet[Task]:
    """Tasks the user may read: their own, or all of them for auditors."""
    if can_audit(user):
        return Task.objects.all()
    return Task.objects.filter(owner=user)


def may_read(user: Any, owner_id: Any) -> bool:
    """Whether ``user`` may read a task owned by ``owner_id``: as
    :func:`visible_tasks` says, asking for the audit permission (two queries)
    only when the task is not the user's own."""
    if not user.is_authenticated:
        return False
    return owner_id == user.pk or can_audit(user)


def visible_task_values(user: Any, task_id: Any, *names: str) -> tuple[Any, ...] | None:
    """The columns ``names`` of task ``task_id`` if ``user`` may read it; None
    otherwise. One query, and the permission's only for another's task."""
    row = Task.objects.filter(pk=task_id).values_list("owner_id", *names).first()
    if row is None or not may_read(user, row[0]):
        return None
    return tuple(row[1:])


def visible_task(user: Any, task_id: Any, *, brief: bool = False) -> Task | None:
    """Task ``task_id`` with its agent, owner, conversation and parent, if the
    user may read it; None otherwise (others' tasks are not found, not refused).
    ``brief``: with only what its payload shows (:func:`runs.payloads.task_payload`:
    the API's task detail, which a client polls)."""
    rows = (
        task_payload_rows()
        if brief
        else Task.objects.select_related("agent", "owner", "conversation", "parent")
    )
    task = rows.filter(pk=task_id).first()
    return task if task is not None and may_read(user, task.owner_id) else None


def default_agent(user: Any = None) -> Agent | None:
    """The agent a new conversation talks to when none is named: the default one,
    else the first; with ``user``, of the agents that user may use."""
    agents = Agent.objects.all() if user is None else usable_agents(user)
    return agents.filter(is_default=True).first() or agents.first()


def filter_equal(
    rows: QuerySet[Any], params: Mapping[str, Any], lookups: Mapping[str, str]
) -> QuerySet[Any]:
    """Narrow ``rows`` by each list filter that is set: ``lookups`` maps a query
    parameter to the field it must equal."""
    for param, lookup in lookups.items():
        value = params.get(param)
        if value:
            rows = rows.filter(**{lookup: value})
    return rows


def filter_agent_version(rows: QuerySet[Any], value: str | None) -> QuerySet[Any]:
    """Runs of the agent version numbered ``value`` (``3`` or ``v3``); a value
    that is no number matches none, an empty one leaves ``rows`` as they are."""
    text = (value or "").strip().lstrip("v")
    if not text:
        return rows
    if not text.isdigit():
        return rows.none()
    return rows.filter(agent_version=int(text))


def filter_tainted(rows: QuerySet[Any], choice: str | None) -> QuerySet[Any]:
    """``yes``: only rows that read untrusted output; ``no``: only the others."""
    if choice == "yes":
        return rows.exclude(tainted_by=[])
    if choice == "no":
        return rows.filter(tainted_by=[])
    return rows
