"""Who may use which agent and which tool.

An agent or a tool names the users and the groups that may use it
(``allowed_users``, ``allowed_groups``); with both empty everyone may, as before
these lists existed. Superusers may use everything (they could grant it to
themselves anyway). A user who may not use an agent does not see it (the chat,
``GET /api/agents/``) and cannot start a conversation with it or post to one; a
run offers the model only the tools its user may use (:func:`usable_tools`, at
the run's start), so that a call of any other tool is refused like a call of a
tool that does not exist — the observation names no hidden tool.

Every check asks the database one plain question, "which of these rows are
closed to this user?" (:func:`_denied`), rather than filtering with ``EXISTS``
subqueries: those cost the ORM about 2 ms each to compile, and each message
posted checks the agent and the tools (about 8 ms in all). Nothing is cached, so
an operator's change to a list holds for the very next request in every process.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import QuerySet

from registry.models import Agent, Tool

_Model = TypeVar("_Model", Agent, Tool)


@cache
def _denied_sql(model: type[Agent] | type[Tool], some: bool) -> str:
    """The query behind :func:`_denied` for ``model`` (for given rows when
    ``some``; their placeholders go at ``{rows}``): each row with a list, and
    whether the user is on it, by name or through a group; the rows whose lists
    all lack the user are denied."""
    # Only names taken from the models' meta go into the text; values are
    # parameters.
    quote = connection.ops.quote_name
    memberships = get_user_model().groups.field
    member_table = quote(memberships.remote_field.through._meta.db_table)
    member_user = quote(memberships.m2m_column_name())
    member_group = quote(memberships.m2m_reverse_name())
    parts = []
    for relation, matches in (
        ("allowed_users", "{target} = %s"),
        (
            "allowed_groups",
            f"{{target}} IN (SELECT {member_group} FROM {member_table} "  # noqa: S608
            f"WHERE {member_user} = %s)",
        ),
    ):
        field = getattr(model, relation).field
        table = quote(field.remote_field.through._meta.db_table)
        row = quote(field.m2m_column_name())
        target = quote(field.m2m_reverse_name())
        where = f" WHERE {row} IN ({{rows}})" if some else ""
        on_list = matches.format(target=target)
        parts.append(
            f"SELECT {row} AS row_id, CASE WHEN {on_list} THEN 1 ELSE 0 END AS listed "  # noqa: S608
            f"FROM {table}{where}"
        )
    return (
        f"SELECT row_id FROM ({' UNION ALL '.join(parts)}) AS links "  # noqa: S608
        "GROUP BY row_id HAVING MAX(listed) = 0"
    )


def _denied(
    model: type[Agent] | type[Tool], user: Any, pks: list[int] | None
) -> set[int]:
    """The primary keys of ``model``'s rows (of ``pks``, or of all) that have a
    user or group list without ``user`` on it. One query, whatever the lists."""
    if getattr(user, "is_superuser", False) or pks == []:
        return set()
    user_pk = user.pk if getattr(user, "is_authenticated", False) else None
    sql = _denied_sql(model, pks is not None)
    params: list[Any]
    if pks is not None:
        sql = sql.format(rows=", ".join(["%s"] * len(pks)))
        params = [user_pk, *pks, user_pk, *pks]
    else:
        params = [user_pk, user_pk]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row_id for (row_id,) in cursor.fetchall()}


def _usable(rows: QuerySet[_Model], user: Any) -> QuerySet[_Model]:
    denied = _denied(rows.model, user, None)
    return rows.exclude(pk__in=denied) if denied else rows


def usable_agents(user: Any, agents: QuerySet[Agent] | None = None) -> QuerySet[Agent]:
    """The agents ``user`` may use (of ``agents``, or of all of them)."""
    return _usable(agents if agents is not None else Agent.objects.all(), user)


def may_use_agent(user: Any, agent: Agent) -> bool:
    return agent.pk not in _denied(Agent, user, [agent.pk])


def usable_tools_of(user: Any, tools: QuerySet[Tool] | None = None) -> QuerySet[Tool]:
    """The tools ``user`` may use (of ``tools``, or of all of them), as a query."""
    return _usable(tools if tools is not None else Tool.objects.all(), user)


def usable_tool_ids(user: Any, tools: Iterable[Tool]) -> set[int]:
    """The primary keys of those of ``tools`` that ``user`` may use (one query)."""
    pks = [tool.pk for tool in tools]
    return set(pks) - _denied(Tool, user, pks)


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
