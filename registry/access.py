"""Who may use which agent and which tool.

An agent or a tool names the users and the groups that may use it
(``allowed_users``, ``allowed_groups``); with both empty everyone may, as before
these lists existed. Superusers may use everything (they could grant it to
themselves anyway). A user who may not use an agent does not see it (the chat,
``GET /api/agents/``) and cannot start a conversation with it or post to one; a
run offers the model only the tools its user may use (:func:`usable_tools`, at
the run's start), so that a call of any other tool is refused like a call of a
tool that does not exist — the observation names no hidden tool.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from django.db.models import Exists, OuterRef, Q, QuerySet

from registry.models import Agent, Tool

_Model = TypeVar("_Model", Agent, Tool)


def _links(model: type[_Model], relation: str, **match: Any) -> Any:
    """Rows of ``model``'s ``relation`` through table that point at the outer row
    (and at ``match``: ``target`` for the user or group, ``targets`` for several)."""
    field = getattr(model, relation).field
    through = field.remote_field.through
    lookups: dict[str, Any] = {field.m2m_field_name(): OuterRef("pk")}
    target = field.m2m_reverse_field_name()
    if "target" in match:
        lookups[target] = match["target"]
    if "targets" in match:
        lookups[f"{target}__in"] = match["targets"]
    return through.objects.filter(**lookups)


def _usable(rows: QuerySet[_Model], user: Any) -> QuerySet[_Model]:
    model = rows.model
    if getattr(user, "is_superuser", False):
        return rows
    allowed = ~Q(Exists(_links(model, "allowed_users"))) & ~Q(
        Exists(_links(model, "allowed_groups"))
    )
    if getattr(user, "is_authenticated", False):
        allowed |= Q(Exists(_links(model, "allowed_users", target=user.pk))) | Q(
            Exists(_links(model, "allowed_groups", targets=user.groups.all()))
        )
    return rows.filter(allowed)


def usable_agents(user: Any, agents: QuerySet[Agent] | None = None) -> QuerySet[Agent]:
    """The agents ``user`` may use (of ``agents``, or of all of them)."""
    return _usable(agents if agents is not None else Agent.objects.all(), user)


def may_use_agent(user: Any, agent: Agent) -> bool:
    return usable_agents(user, Agent.objects.filter(pk=agent.pk)).exists()


def usable_tools_of(user: Any, tools: QuerySet[Tool] | None = None) -> QuerySet[Tool]:
    """The tools ``user`` may use (of ``tools``, or of all of them), as a query."""
    return _usable(tools if tools is not None else Tool.objects.all(), user)


def usable_tool_ids(user: Any, tools: Iterable[Tool]) -> set[int]:
    """The primary keys of those of ``tools`` that ``user`` may use (one query)."""
    pks = [tool.pk for tool in tools]
    if not pks:
        return set()
    return set(
        _usable(Tool.objects.filter(pk__in=pks), user).values_list("pk", flat=True)
    )


def usable_tools(user: Any, tools: Iterable[Tool]) -> list[Tool]:
    """Those of ``tools`` that ``user`` may use, in their order."""
    tools = list(tools)
    allowed = usable_tool_ids(user, tools)
    return [tool for tool in tools if tool.pk in allowed]


def may_use_tool(user: Any, tool: Tool) -> bool:
    return tool.pk in usable_tool_ids(user, [tool])


def offered_tools_for(agent: Agent, user: Any) -> list[Tool]:
    """The agent's offered tools that ``user`` may use (what their runs offer)."""
    return usable_tools(user, agent.offered_tools())


def access_summary(obj: Agent | Tool) -> str:
    """Who may use ``obj``, in a few words (the admin's list)."""
    users = [u.get_username() for u in obj.allowed_users.all()]
    groups = [f"@{g.name}" for g in obj.allowed_groups.all()]
    return ", ".join([*users, *groups]) or "everyone"
