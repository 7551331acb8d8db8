"""Tool registry services: saving definitions (with versions), building toolboxes."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append
from engine.canonical import canonical_json
from engine.guards import GUARDRAILS_KEY
from engine.json_input import json_problem
from engine.planning import (
    DefinitionError,
    check_definition,
    check_parameters_schema,
    check_tool_name,
)
from engine.pricing import PRICE_KEY, ModelPrice, price_for
from engine.routing import ROUTE_KEY, ROUTING_KEY, Route, Routing
from engine.safe_eval import EvaluationError, validate_rule
from engine.spec import AgentSnapshot, Handler, Toolbox, ToolSpec
from engine.structured import ANSWER_SCHEMA_KEY
from registry import access
from registry.adapters import mcp as mcp_adapter
from registry.adapters.http import http_handler, http_settings_errors, leaves_house
from registry.handlers import get_handler, handler_names
from registry.models import (
    AGENT_VERSIONED_FIELDS,
    Agent,
    AgentLabel,
    AgentVersion,
    Handoff,
    MCPServer,
    Tool,
    ToolVersion,
)
from registry.models import ModelPrice as PriceRow
from registry.payloads import (
    TOOL_FIELDS,
    TOOL_IMPLEMENTATION_FIELDS,
    TOOL_REQUIRED_FIELDS,
    tool_definition,
)

#: Fields whose change makes a new version: the public definition (docs/api.md)
#: and the implementation behind it (the MCP server compared by its id).
VERSIONED_FIELDS = tuple(f for f in TOOL_FIELDS if f != "name") + tuple(
    "mcp_server_id" if f == "mcp_server" else f for f in TOOL_IMPLEMENTATION_FIELDS
)


def tool_clean(tool: Tool) -> dict[str, list[str]]:
    """Validate a tool definition; return errors by field name (empty if valid)."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    try:
        check_tool_name(tool.name)
    except ValueError as exc:
        add("name", str(exc))
    try:
        check_parameters_schema(tool.parameters)
    except ValueError as exc:
        add("parameters", str(exc))
    if not (tool.description or "").strip():
        add("description", "Describe what the tool does; the model reads it.")
    if tool.approval == Tool.Approval.RULE and (tool.approval_rule or "").strip():
        try:
            validate_rule(tool.approval_rule or "")
        except EvaluationError as exc:
            add("approval_rule", str(exc))
    try:
        check_definition(tool.spec())
    except DefinitionError as exc:
        add(exc.field, str(exc))
    except ValueError as exc:
        # Settings the spec cannot be built from at all (an unknown risk, say).
        add("approval", str(exc))
    except (KeyError, TypeError):
        pass
    if tool.kind == Tool.Kind.PYTHON:
        name = tool.handler or tool.name
        if name not in handler_names():
            add(
                "handler",
                f"No python handler named '{name}'. Registered: "
                + ", ".join(handler_names()),
            )
    if tool.kind == Tool.Kind.HTTP:
        for message in http_settings_errors(
            tool.http,
            tool.parameters if isinstance(tool.parameters, Mapping) else {},
            idempotent=bool(tool.idempotent),
            max_retries=int(tool.max_retries or 0),
        ):
            add("http", message)
    for field_name, (low, high) in _INTEGER_RANGES.items():
        value = getattr(tool, field_name)
        if isinstance(value, int) and not low <= value <= high:
            add(field_name, f"{field_name} is an integer from {low} to {high}.")
    if tool.timeout_s <= 0 or tool.timeout_s > 600:
        add("timeout_s", "Timeout must be between 0 and 600 seconds.")
    for pointer in tool.result_fields or []:
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            add("result_fields", f"Not a JSON pointer: {pointer!r} (use /field).")
    if not isinstance(tool.tags, list) or not all(
        isinstance(t, str) for t in tool.tags
    ):
        add("tags", "Tags are a list of strings.")
    if tool.kind == Tool.Kind.MCP and tool.mcp_server_id is None:
        add("mcp_server", "An MCP tool names the MCP server that serves it.")
    if tool.enabled and not tool.confirmed:
        # Imported tools carry a policy guessed from the server's hints.
        add(
            "enabled",
            "This imported tool's policy is not confirmed yet: review its risk, "
            "approval and the other policy fields, then confirm it (the "
            "“Confirm policy and enable” action, or tick Confirmed) before "
            "enabling it.",
        )
    return errors


#: The integer fields of a definition and the values every supported database
#: stores in their columns (PostgreSQL's ranges; SQLite would take more, and
#: fail only past 64 bits).
_INTEGER_RANGES: dict[str, tuple[int, int]] = {
    field.name: BaseDatabaseOperations.integer_field_ranges[field.get_internal_type()]
    for field in Tool._meta.concrete_fields
    if field.name in TOOL_FIELDS
    and field.get_internal_type() in BaseDatabaseOperations.integer_field_ranges
}


def _versioned_state(tool: Tool) -> str:
    return canonical_json(
        {name: _jsonable(getattr(tool, name)) for name in VERSIONED_FIELDS}
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@transaction.atomic
def tool_save(*, tool: Tool, user: Any = None) -> tuple[Tool, bool]:
    """Validate and save ``tool``; a changed definition becomes a new version.

    Returns the tool and whether a new version was made.
    """
    if not tool.approval_rule:
        # A blank form field means "no rule", the same as null: not a change.
        tool.approval_rule = None
    errors = tool_clean(tool)
    if errors:
        raise ValidationError(errors)
    previous = None
    if tool.pk is not None:
        previous = Tool.objects.select_for_update().filter(pk=tool.pk).first()
    if previous is not None and _versioned_state(previous) == _versioned_state(tool):
        tool.version = previous.version
        tool.save()
        return tool, False
    tool.version = (previous.version + 1) if previous is not None else 1
    if tool.pk is None:
        existing = ToolVersion.objects.filter(tool__name=tool.name)
        tool.version = max([1, *(v.version + 1 for v in existing)])
    tool.save()
    ToolVersion.objects.create(
        tool=tool,
        version=tool.version,
        definition=tool_definition(tool),
        changed_by=user if getattr(user, "is_authenticated", False) else None,
        changed_at=timezone.now(),
    )
    audit_append(
        kind=AuditKind.TOOL_REGISTERED
        if previous is None
        else _change_kind(previous, tool),
        actor=user,
        object_type="tool",
        object_id=tool.name,
        data={"version": tool.version},
    )
    return tool, True


def tool_confirm(*, tool: Tool, user: Any = None, enable: bool = True) -> Tool:
    """An operator confirms ``tool``'s policy (imported tools start unconfirmed).

    Enables it too unless ``enable`` is false; a new version records who and when.
    """
    with transaction.atomic():
        tool = Tool.objects.select_for_update().get(pk=tool.pk)
        was_confirmed = tool.confirmed
        tool.confirmed = True
        if enable:
            tool.enabled = True
        tool, _ = tool_save(tool=tool, user=user)
        if not was_confirmed:
            audit_append(
                kind=AuditKind.TOOL_CONFIRMED,
                actor=user,
                object_type="tool",
                object_id=tool.name,
                data={"version": tool.version},
            )
    return tool


def _change_kind(previous: Tool, tool: Tool) -> AuditKind:
    if previous.enabled != tool.enabled:
        return AuditKind.TOOL_ENABLED if tool.enabled else AuditKind.TOOL_DISABLED
    return AuditKind.TOOL_CHANGED


def handler_for(tool: Tool) -> Handler | None:
    """The callable that executes ``tool`` (python, http or mcp)."""
    if tool.kind == Tool.Kind.PYTHON:
        return get_handler(tool.handler or tool.name)
    if tool.kind == Tool.Kind.HTTP:
        return http_handler(tool)
    if tool.kind == Tool.Kind.MCP:
        return mcp_adapter.mcp_handler(tool)
    return None


def spec_for(tool: Tool) -> ToolSpec:
    spec = tool.spec()
    if tool.kind == Tool.Kind.HTTP:
        spec = ToolSpec(**{**spec.__dict__, "leaves_house": leaves_house(tool)})
    elif tool.kind == Tool.Kind.MCP:
        spec = ToolSpec(**{**spec.__dict__, "leaves_house": True})
    return spec


#: The label whose version chats run (registry.versions).
PRODUCTION = "production"


def version_resolve(agent: Agent | Any) -> AgentVersion | None:
    """The version a chat of ``agent`` runs: the one labelled ``production``,
    else the newest; None for an agent with no version. One query, in raw SQL:
    it is on the path of every message a chat accepts."""
    agent_id = agent.pk if isinstance(agent, Agent) else agent
    with connection.cursor() as cursor:
        cursor.execute(_resolve_sql(), [PRODUCTION, agent_id])
        row = cursor.fetchone()
    if row is None:
        return None
    pk, number, snapshot = row
    field = AgentVersion._meta.get_field("snapshot")
    return AgentVersion(
        pk=pk,
        agent_id=agent_id,
        number=number,
        snapshot=field.from_db_value(snapshot, None, connection),  # type: ignore[attr-defined]
    )


@functools.cache
def _resolve_sql() -> str:
    def q(name: str) -> str:
        return connection.ops.quote_name(name)

    versions, labels = (
        q(AgentVersion._meta.db_table),
        q(AgentLabel._meta.db_table),
    )
    return (
        f"SELECT v.{q('id')}, v.{q('number')}, v.{q('snapshot')} "  # noqa: S608
        f"FROM {versions} v LEFT JOIN {labels} l "
        f"ON l.{q('version_id')} = v.{q('id')} AND l.{q('name')} = %s "
        f"WHERE v.{q('agent_id')} = %s "
        f"ORDER BY CASE WHEN l.{q('id')} IS NULL THEN 0 ELSE 1 END DESC, "
        f"v.{q('number')} DESC LIMIT 1"
    )


def agent_as_of(agent: Agent, version: AgentVersion) -> tuple[Agent, list[str]]:
    """An unsaved copy of ``agent`` with ``version``'s fields, and the names of
    the tools that version chose (:meth:`Agent.offered_tools` takes them)."""
    copy = Agent()
    for field in Agent._meta.concrete_fields:
        setattr(copy, field.attname, getattr(agent, field.attname))
    copy._state.adding = False
    names: list[str] = []
    for name, value in version.snapshot.items():
        if name == "tools":
            names = list(value or [])
        elif name in AGENT_VERSIONED_FIELDS:
            setattr(copy, name, value)
    return copy, names


def agent_as_run(agent: Agent) -> tuple[Agent, list[str] | None]:
    """``agent`` as a run started now would use it (the version chats run,
    :func:`version_resolve`) and the tools that version chose by name; the live
    row and None for an agent without versions."""
    version = version_resolve(agent)
    if version is None:
        return agent, None
    return agent_as_of(agent, version)


def offered_tools_now(agent: Agent, user: Any) -> list[Tool]:
    """The tools a run of ``agent`` started now offers ``user`` (what the chat
    page and ``GET /api/agents/`` list)."""
    running, names = agent_as_run(agent)
    return access.usable_tools(user, running.offered_tools(names))


def agent_snapshot_of(
    agent: Agent, *, user: Any = None, version: AgentVersion | None = None
) -> AgentSnapshot:
    """The agent as a run will use it: instructions, model, limits and tools.

    With ``user`` (the run's owner) only the tools that user may use are in it
    (:mod:`registry.access`): the run offers the model nothing else, and a call
    of any other tool is planned as a call of an unknown tool. With ``version``
    (:mod:`registry.versions`) its fields are that version's, not the live
    row's; the handoffs stay the agent's.
    """
    if version is not None:
        agent, names = agent_as_of(agent, version)
        tools = agent.offered_tools(names)
    else:
        tools = agent.offered_tools()
    if user is not None:
        tools = access.usable_tools(user, tools)
    routing = agent.routing()
    return AgentSnapshot(
        name=agent.name,
        model=agent.effective_model,
        instructions=agent.instructions,
        limits=agent.limits(),
        tools=tuple(
            tool_definition(t) | {"leaves_house": spec_for(t).leaves_house}
            for t in tools
        ),
        # An agent without targets costs no query (its flag says so).
        handoffs=tuple(handoffs_of(agent)) if agent.has_handoffs else (),
        extra=_snapshot_extra(agent, routing),
    )


def _snapshot_extra(agent: Agent, routing: Routing | None) -> dict[str, Any]:
    """What a snapshot records beside the engine's fields: the toolsets, the
    answer's schema (engine.structured) and the guardrails (engine.guards)."""
    extra: dict[str, Any] = {}
    if routing is not None:
        extra[ROUTING_KEY] = routing.to_json()
    if agent.answer_schema:
        extra[ANSWER_SCHEMA_KEY] = agent.answer_schema
    if agent.guardrail_specs:
        extra[GUARDRAILS_KEY] = list(agent.guardrail_specs)
    return extra


def handoffs_of(agent: Agent) -> list[dict[str, str]]:
    """The agents ``agent`` may hand off to, as its snapshot records them."""
    return [
        {"agent": h.target.name, "description": h.description}
        for h in Handoff.objects.filter(source=agent)
        .select_related("target")
        .order_by("target__name")
    ]


def agent_handoffs_sync(
    *, agent: Agent, user: Any = None, before: list[dict[str, str]] | None = None
) -> list[dict[str, str]]:
    """After ``agent``'s handoff rows changed (``before``: what they were): keep
    its ``has_handoffs`` flag, and audit the new list when it differs."""
    after = handoffs_of(agent)
    if agent.has_handoffs != bool(after):
        agent.has_handoffs = bool(after)
        Agent.objects.filter(pk=agent.pk).update(has_handoffs=agent.has_handoffs)
    if after != (before or []):
        # The targets' names, not the descriptions: the log carries no text.
        audit_append(
            kind=AuditKind.AGENT_HANDOFFS_CHANGED,
            actor=user,
            object_type="agent",
            object_id=agent.name,
            data={"targets": [target["agent"] for target in after]},
        )
    return after


def agent_handoffs_set(
    *, agent: Agent, targets: Sequence[tuple[Agent, str]], user: Any = None
) -> list[dict[str, str]]:
    """Make ``targets`` (each an agent and when to hand off to it) the agents
    ``agent`` may hand its conversations to; audited. Raises ValidationError for
    a target the agent cannot have (itself, a name too long for a tool)."""
    with transaction.atomic():
        before = handoffs_of(agent)
        rows = [
            Handoff(source=agent, target=target, description=description)
            for target, description in targets
        ]
        for row in rows:
            row.full_clean(validate_unique=False)
        Handoff.objects.filter(source=agent).delete()
        Handoff.objects.bulk_create(rows)
        return agent_handoffs_sync(agent=agent, user=user, before=before)


def model_price(model: str) -> ModelPrice | None:
    """The price table's most specific price for ``model`` (one query)."""
    return price_for(model, (row.price() for row in PriceRow.objects.all()))


def snapshot_priced(snapshot: AgentSnapshot) -> AgentSnapshot:
    """``snapshot`` with the price of its model, which the run keeps (read once,
    when it starts: no step of it reads the price table)."""
    price = model_price(snapshot.model)
    extra = {k: v for k, v in snapshot.extra.items() if k != PRICE_KEY}
    if price is not None:
        extra[PRICE_KEY] = price.to_json()
    return snapshot.replace(extra=extra)


def snapshot_routed(
    snapshot: AgentSnapshot, text: str
) -> tuple[AgentSnapshot, Route | None]:
    """Route a turn by rules (engine.routing) when it starts: the snapshot keeps
    only the tools of the toolsets ``text`` names and records the route.

    Returns the route, or None when the agent has no toolsets or the run is to
    ask the model first (the snapshot then keeps every candidate tool).
    """
    routing = Routing.from_json(snapshot.extra.get(ROUTING_KEY))
    if routing is None:
        return snapshot, None
    route = routing.at_start(text)
    if route is None:
        return snapshot, None
    return (
        snapshot.replace(
            tools=routing.definitions(route, snapshot.tools),
            extra={**snapshot.extra, ROUTE_KEY: route.to_json()},
        ),
        route,
    )


def agent_snapshot(agent: Agent, *, user: Any = None) -> dict[str, Any]:
    """:func:`agent_snapshot_of` as a task records it (``Task.agent_snapshot``)."""
    return agent_snapshot_of(agent, user=user).to_json()


#: The spec of a recorded tool definition (one definition: the engine's).
def toolbox_for_snapshot(snapshot: AgentSnapshot | Mapping[str, Any]) -> Toolbox:
    """Specs as the run saw them at its start; handlers only for tools still enabled.

    ``snapshot`` is an :class:`AgentSnapshot` or the JSON a task recorded.
    """
    specs = AgentSnapshot.from_json(snapshot).specs()
    live = {
        t.name: t
        for t in Tool.objects.filter(name__in=list(specs), enabled=True).select_related(
            "mcp_server"
        )
    }
    handlers: dict[str, Handler] = {}
    for name in specs:
        tool = live.get(name)
        if tool is not None:
            handler = handler_for(tool)
            if handler is not None:
                handlers[name] = handler
    return Toolbox(specs=specs, handlers=handlers)


#: What each field of a definition may be in JSON: the spec's fields as
#: ToolSpec types them, ``enabled``, and the implementation fields that apply.
_SPEC_TYPES = {**ToolSpec.json_types(), "enabled": (bool,)}
_DEFINITION_TYPES: dict[str, tuple[type, ...]] = {
    name: _SPEC_TYPES[name] for name in TOOL_FIELDS
} | {"handler": (str,), "http": (dict,)}


def tool_from_definition(data: Mapping[str, Any]) -> Tool:
    """A Tool (new, or the existing one by name) with ``data`` applied; unsaved.

    Fields not given keep their current value (or the default for a new tool).
    Raises ValidationError with errors by field.
    """
    errors: dict[str, list[str]] = {}
    for name in TOOL_REQUIRED_FIELDS:
        if name not in data:
            errors.setdefault(name, []).append("This field is required.")
    for name, value in data.items():
        # What the API's parser refuses, refused here for every other caller.
        found = json_problem({name: value})
        if found is not None:
            errors.setdefault(str(name), []).append(found[0])
            continue
        types = _DEFINITION_TYPES.get(name)
        if types is None:
            continue
        if isinstance(value, bool) and bool not in types:
            errors.setdefault(name, []).append("Wrong type.")
        elif not isinstance(value, types):
            errors.setdefault(name, []).append(
                "Expected " + " or ".join(t.__name__ for t in types) + "."
            )
    kind = data.get("kind")
    if kind is not None and kind not in Tool.Kind.values:
        errors.setdefault("kind", []).append("kind is python, http or mcp.")
    for field_name, choices in (
        ("risk", Tool.Risk.values),
        ("approval", Tool.Approval.values),
    ):
        if field_name in data and data[field_name] not in choices:
            errors.setdefault(field_name, []).append(
                "One of: " + ", ".join(choices) + "."
            )
    if errors:
        raise ValidationError(errors)
    tool = Tool.objects.filter(name=data["name"]).first() or Tool(name=data["name"])
    for name in _DEFINITION_TYPES:
        if name in data and name != "name":
            setattr(tool, name, data[name])
    if tool.approval_rule == "":
        tool.approval_rule = None
    if tool.kind == Tool.Kind.MCP and isinstance(data.get("mcp"), dict):
        server = MCPServer.objects.filter(name=data["mcp"].get("server")).first()
        if server is None:
            raise ValidationError({"mcp": ["Unknown MCP server."]})
        tool.mcp_server = server
        tool.mcp_tool = str(data["mcp"].get("tool") or tool.name)
    return tool
