"""Importing a trace document (``reach.trace/v1``) from another instance.

An import always gets new ids (conversation, task, steps) and is kept as a
read-only record: its ``origin`` says where it came from, the runner never
claims it and its conversation takes no new messages. Everything in it is
attacker-controlled text: it is validated, bounded and redacted on the way in,
and rendered escaped like everything else.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from django.db import DataError, transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.models import AuditKind
from audit.services import audit_task
from engine.json_input import json_problem
from engine.planning import check_parameters_schema
from engine.spec import (
    FINAL_TASK_STATUSES,
    AgentSnapshot,
    StepKind,
    StepStatus,
    StopReason,
    TaskStatus,
    ToolSpec,
)
from infra.runtime import redactor
from registry.models import Agent
from runs.finish import message_add
from runs.models import Conversation, Message, Step, Task
from traces.export import FORMAT

MAX_STEPS = 20_000
MAX_APPROVALS = 5_000
MAX_AUDIT = 20_000

_KINDS = {k.value for k in StepKind}
_STEP_STATUSES = {s.value for s in StepStatus}
_TASK_STATUSES = {s.value for s in TaskStatus}
_FINAL = {s.value for s in FINAL_TASK_STATUSES}
_STOP_REASONS = {s.value for s in StopReason}

#: The step columns an imported document fills (all but the row's identity).
_STEP_COLUMNS = {
    f.name: f for f in Step._meta.concrete_fields if f.name not in ("id", "task")
}
#: Step string fields and the longest value the database keeps (kind and status
#: are checked against their vocabularies instead).
_STEP_STRINGS = {
    name: getattr(f, "max_length", None)
    for name, f in _STEP_COLUMNS.items()
    if f.get_internal_type() in ("CharField", "TextField")
    and name not in ("kind", "status")
}
#: Step integer fields but ``seq`` (which every step must have).
_STEP_INTS = tuple(
    name
    for name, f in _STEP_COLUMNS.items()
    if f.get_internal_type().endswith("IntegerField") and name != "seq"
)
_STEP_OBJECTS = ("response", "usage", "detail")


def _column_max(model: type[Any], name: str) -> int:
    """The largest value ``model.name`` holds on every supported database."""
    internal = model._meta.get_field(name).get_internal_type()
    return BaseDatabaseOperations.integer_field_ranges[internal][1]


#: The largest seq, parent_seq, call_index and tool_version a step row holds.
_MAX_STEP_INT = _column_max(Step, "seq")
#: The largest token count a task row holds.
_MAX_TOKENS = _column_max(Task, "total_tokens")


class TraceInvalid(ValueError):
    """The document is not an importable ``reach.trace/v1`` trace."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _one_of(value: Any, choices: set[str]) -> bool:
    # Text only: a list or an object is never a member (nor hashable).
    return isinstance(value, str) and value in choices


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time_ok(value: Any) -> bool:
    if value is None:
        return True
    return isinstance(value, str) and _parse_time(value) is not None


def _parse_time(value: Any) -> dt.datetime | None:
    # fromisoformat takes any run of digits as a fraction: bound the length.
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return None
    if parsed is None:
        return None
    try:
        if timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, dt.UTC)
        # Stored in UTC: a time at the edge of the calendar may not convert.
        return parsed.astimezone(dt.UTC)
    except (OverflowError, ValueError):
        return None


def trace_validate(document: Any) -> list[str]:
    """Every way ``document`` fails the ``reach.trace/v1`` shape (empty if none)."""
    if not isinstance(document, Mapping):
        return ["The document must be a JSON object."]
    # What the API's parser refuses, refused here too for every other caller.
    found = json_problem(document)
    if found is not None:
        return [found[0]]
    errors: list[str] = []
    if document.get("format") != FORMAT:
        errors.append(f'"format" must be "{FORMAT}".')
    task = document.get("task")
    if not isinstance(task, Mapping):
        errors.append('"task" must be an object.')
        task = {}
    status = task.get("status")
    if not _one_of(status, _TASK_STATUSES):
        errors.append('"task.status" must be a task status.')
    elif status not in _FINAL:
        errors.append(
            "Only finished runs can be imported (task.status succeeded, stopped, "
            "failed or cancelled)."
        )
    if task.get("stop_reason") is not None and not _one_of(
        task.get("stop_reason"), _STOP_REASONS
    ):
        errors.append('"task.stop_reason" is not a stop reason.')
    for key in ("id", "goal", "model", "final_answer", "error"):
        if task.get(key) is not None and not isinstance(task.get(key), str):
            errors.append(f'"task.{key}" must be a string.')
    for key in ("created_at", "started_at", "finished_at"):
        if not _time_ok(task.get(key)):
            errors.append(f'"task.{key}" must be an ISO 8601 time.')
    usage = task.get("usage")
    if usage is not None and (
        not isinstance(usage, Mapping)
        or not all(_is_int(v) and 0 <= v <= _MAX_TOKENS for v in usage.values())
    ):
        errors.append(
            f'"task.usage" must map token counts to integers (0 to {_MAX_TOKENS}).'
        )
    if task.get("tainted_by") is not None and not _strings(task.get("tainted_by")):
        errors.append('"task.tainted_by" must be a list of strings.')
    for key in ("agent", "conversation"):
        if document.get(key) is not None and not isinstance(document.get(key), Mapping):
            errors.append(f'"{key}" must be an object.')
    conversation = document.get("conversation") or {}
    if isinstance(conversation, Mapping) and conversation.get("messages") is not None:
        messages = conversation.get("messages")
        if not isinstance(messages, list) or not all(
            isinstance(m, Mapping) for m in messages
        ):
            errors.append('"conversation.messages" must be a list of objects.')
    agent = document.get("agent") or {}
    if isinstance(agent, Mapping):
        for key in ("name", "model", "instructions"):
            if agent.get(key) is not None and not isinstance(agent.get(key), str):
                errors.append(f'"agent.{key}" must be a string.')
        if agent.get("limits") is not None and not isinstance(
            agent.get("limits"), Mapping
        ):
            errors.append('"agent.limits" must be an object.')
    if isinstance(agent, Mapping) and agent.get("tools") is not None:
        tools = agent.get("tools")
        if not isinstance(tools, list) or not all(
            isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in tools
        ):
            errors.append('"agent.tools" must be a list of tool definitions.')
        else:
            errors += _tool_errors(tools)
    for key, limit in (("approvals", MAX_APPROVALS), ("audit", MAX_AUDIT)):
        value = document.get(key)
        if value is not None and (
            not isinstance(value, list)
            or not all(isinstance(v, Mapping) for v in value)
        ):
            errors.append(f'"{key}" must be a list of objects.')
        elif isinstance(value, list) and len(value) > limit:
            errors.append(f'"{key}" has more than {limit} entries.')
    errors += _step_errors(document.get("steps"))
    return errors


def _response_errors(where: str, response: Mapping[str, Any]) -> list[str]:
    """Why a recorded assistant message could not be read back as one (a
    re-run replays it); empty when it can."""
    errors: list[str] = []
    content = response.get("content")
    if content is not None and not isinstance(content, str):
        errors.append(f"{where}.content must be text or null.")
    calls = response.get("tool_calls")
    if calls is None:
        return errors
    if not isinstance(calls, list):
        return [*errors, f"{where}.tool_calls must be a list."]
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(function or {}, Mapping):
            errors.append(
                f"{where}.tool_calls[{index}] must be an object with a "
                '"function" object.'
            )
            continue
        named = (call.get("id"), (function or {}).get("name"))
        if any(value is not None and not isinstance(value, str) for value in named):
            errors.append(
                f"{where}.tool_calls[{index}]: its id and function name are text."
            )
    return errors


def _tool_errors(tools: list[Mapping[str, Any]]) -> list[str]:
    """Why recorded tool definitions could not be read back (a re-run reads
    them as specs); empty when every one can."""
    errors: list[str] = []
    for index, definition in enumerate(tools[:200]):
        where = f"agent.tools[{index}]"
        try:
            ToolSpec.from_definition(definition)
            check_parameters_schema(definition.get("parameters") or {"type": "object"})
        except (ValueError, TypeError, OverflowError) as exc:
            errors.append(f"{where} is not a tool definition: {exc}")
    if len(tools) > 200:
        errors.append('"agent.tools" has more than 200 definitions.')
    return errors


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _step_errors(steps: Any) -> list[str]:
    if not isinstance(steps, list):
        return ['"steps" must be a list.']
    if len(steps) > MAX_STEPS:
        return [f"A trace has at most {MAX_STEPS} steps."]
    errors: list[str] = []
    seen: set[int] = set()
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        if not isinstance(step, Mapping):
            errors.append(f"{where} must be an object.")
            continue
        seq = step.get("seq")
        if not _is_int(seq) or not 1 <= seq <= _MAX_STEP_INT:
            errors.append(f"{where}.seq must be an integer from 1 to {_MAX_STEP_INT}.")
        elif seq in seen:
            errors.append(f"{where}.seq {seq} appears twice.")
        else:
            seen.add(seq)
        if not _one_of(step.get("kind"), _KINDS):
            errors.append(f"{where}.kind must be one of {sorted(_KINDS)}.")
        if not _one_of(step.get("status"), _STEP_STATUSES):
            errors.append(f"{where}.status is not a step status.")
        for key, limit in _STEP_STRINGS.items():
            value = step.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                errors.append(f"{where}.{key} must be a string.")
            elif limit is not None and len(value) > limit:
                errors.append(f"{where}.{key} is longer than {limit} characters.")
        for key in _STEP_INTS:
            value = step.get(key)
            # rev only orders the steps (revs are renumbered): any size will do.
            top = None if key == "rev" else _MAX_STEP_INT
            if value is not None and (
                not _is_int(value) or value < 0 or (top is not None and value > top)
            ):
                errors.append(
                    f"{where}.{key} must be a non-negative integer"
                    + (f" (at most {top})." if top is not None else ".")
                )
        for key in _STEP_OBJECTS:
            value = step.get(key)
            if value is not None and not isinstance(value, Mapping):
                errors.append(f"{where}.{key} must be an object.")
        if isinstance(step.get("response"), Mapping):
            errors += _response_errors(f"{where}.response", step["response"])
        if step.get("attempts") is not None and not isinstance(step["attempts"], list):
            errors.append(f"{where}.attempts must be a list.")
        if step.get("tainted_by") is not None and not _strings(step["tainted_by"]):
            errors.append(f"{where}.tainted_by must be a list of strings.")
        for key in ("started_at", "finished_at"):
            if not _time_ok(step.get(key)):
                errors.append(f"{where}.{key} must be an ISO 8601 time.")
        if len(errors) > 50:
            errors.append("… (more errors not shown)")
            break
    return errors


def _goal(task: Mapping[str, Any], conversation: Mapping[str, Any]) -> str:
    goal = task.get("goal")
    if isinstance(goal, str) and goal.strip():
        return goal
    messages = conversation.get("messages") if isinstance(conversation, Mapping) else []
    for message in messages or []:
        if (
            isinstance(message, Mapping)
            and message.get("role") == "user"
            and message.get("task") == task.get("id")
            and isinstance(message.get("content"), str)
        ):
            return str(message["content"])
    return "(imported run)"


def _history(
    task: Mapping[str, Any], conversation: Mapping[str, Any], created: dt.datetime
) -> list[dict[str, str]]:
    """The turns before this task in its source conversation (for re-runs)."""
    turns: list[dict[str, str]] = []
    for message in (conversation or {}).get("messages") or []:
        if not isinstance(message, Mapping) or message.get("task") == task.get("id"):
            continue
        at = _parse_time(message.get("created_at"))
        if at is None or at >= created:
            continue
        if message.get("role") in ("user", "assistant") and isinstance(
            message.get("content"), str
        ):
            turns.append({"role": message["role"], "content": message["content"]})
    while turns and turns[0]["role"] != "user":
        turns.pop(0)
    return turns[-20:]


def _usage(task: Mapping[str, Any]) -> tuple[int, int, int]:
    usage = task.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return prompt, completion, int(usage.get("total_tokens") or prompt + completion)


def _cost(value: Any) -> float | None:
    """A recorded cost (USD) as stored: a finite, non-negative number, else
    unknown (None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value > 1e12:
        return None
    return float(value)


def _agent_for(name: Any) -> Agent:
    agent = (
        Agent.objects.filter(name=name).first() if isinstance(name, str) else None
    ) or (Agent.objects.filter(is_default=True).first() or Agent.objects.first())
    if agent is None:
        raise TraceInvalid(["No agent profile exists here to file the import under."])
    return agent


def trace_import(*, document: Any, user: Any) -> Task:
    """Import ``document`` as a new, read-only task owned by ``user``.

    Raises :class:`TraceInvalid` listing what is wrong with the document.
    """
    errors = trace_validate(document)
    if errors:
        raise TraceInvalid(errors)
    document = redactor().data(document)
    source = document["task"]
    conversation_doc = document.get("conversation") or {}
    agent_doc = document.get("agent") or {}
    now = timezone.now()
    created = _parse_time(source.get("created_at")) or now
    finished = _parse_time(source.get("finished_at")) or created
    goal = _goal(source, conversation_doc)
    agent = _agent_for(agent_doc.get("name") or source.get("agent"))
    prompt, completion, total = _usage(source)
    steps_doc = sorted(document["steps"], key=lambda s: s["seq"])
    old_id = str(source.get("id") or "")
    origin = {
        "format": FORMAT,
        "task": old_id or None,
        "conversation": source.get("conversation"),
        "owner": source.get("owner"),
        "agent": agent_doc.get("name") or source.get("agent"),
        "parent": source.get("parent"),
        "exported_at": document.get("exported_at"),
        "instance": document.get("instance"),
        "imported_by": user.get_username(),
        "imported_at": now.isoformat(),
        "inherited_taint": list(source.get("inherited_taint") or [])
        if _strings(source.get("inherited_taint"))
        else None,
        "approvals": list(document.get("approvals") or []),
        "audit": list(document.get("audit") or []),
        "origin": _without_records(document.get("origin")),
    }
    if origin["inherited_taint"] is None:
        del origin["inherited_taint"]
    try:
        with transaction.atomic():
            conversation = Conversation.objects.create(
                owner=user,
                agent=agent,
                title=f"Imported: {goal}"[:200],
                created_at=now,
                updated_at=now,
            )
            task = Task.objects.create(
                conversation=conversation,
                agent=agent,
                owner=user,
                model=str(source.get("model") or agent_doc.get("model") or "")[:200],
                goal=goal,
                status=source["status"],
                stop_reason=source.get("stop_reason"),
                final_answer=source.get("final_answer"),
                error_message=str(source.get("error") or ""),
                prompt_tokens=prompt,
                completion_tokens=completion,
                total_tokens=total,
                step_count=len(steps_doc),
                rev=len(steps_doc),
                tainted_by=list(source.get("tainted_by") or []),
                # What it cost where it ran (null: unknown there too).
                cost_usd=_cost(source.get("cost_usd")),
                intent=(
                    source["intent"][:200]
                    if isinstance(source.get("intent"), str)
                    else None
                ),
                # Read as any snapshot is: unknown limits dropped, missing ones
                # defaulted.
                agent_snapshot=AgentSnapshot.from_json(
                    {
                        "name": agent_doc.get("name") or agent.name,
                        "model": agent_doc.get("model") or source.get("model"),
                        "instructions": agent_doc.get("instructions") or "",
                        "limits": agent_doc.get("limits") or {},
                        "tools": list(agent_doc.get("tools") or []),
                        "history": _history(source, conversation_doc, created),
                    }
                ).to_json(),
                origin=origin,
                created_at=created,
                started_at=_parse_time(source.get("started_at")),
                finished_at=finished,
                # Retention counts an import from when it arrived.
                updated_at=now,
            )
            Step.objects.bulk_create(_steps(task, steps_doc, old_id))
            message_add(task=task, role=Message.Role.USER, content=goal, at=created)
            message_add(
                task=task,
                role=Message.Role.ASSISTANT,
                content=source.get("final_answer")
                or source.get("error")
                or f"Stopped ({source.get('stop_reason')}).",
                at=finished,
            )
            audit_task(
                AuditKind.TRACE_IMPORTED,
                task_id=task.pk,
                actor=user,
                data={"source_task": old_id or None},
            )
    except (DataError, OverflowError) as exc:
        # Validation bounds every value; this is the net under it, and the
        # transaction has left nothing behind.
        raise TraceInvalid([f"The database refused a value: {exc}"]) from exc
    return task


def _without_records(origin: Any) -> Any:
    if not isinstance(origin, Mapping):
        return None
    return {k: v for k, v in origin.items() if k not in ("approvals", "audit")}


def _steps(task: Task, steps_doc: list[dict[str, Any]], old_id: str) -> list[Step]:
    """New Step rows; revs renumbered in the recorded order of change."""
    order = sorted(steps_doc, key=lambda s: (s.get("rev") or 0, s["seq"]))
    revs = {s["seq"]: index + 1 for index, s in enumerate(order)}
    rows: list[Step] = []
    last_model: int | None = None
    for data in steps_doc:
        kind = data["kind"]
        parent_seq = data.get("parent_seq")
        if kind == StepKind.MODEL_CALL:
            last_model = data["seq"]
        elif kind == StepKind.TOOL_CALL and parent_seq is None:
            parent_seq = last_model
        key = data.get("idempotency_key")
        if key and old_id and key.startswith(old_id + ":"):
            key = f"{task.pk}:{key[len(old_id) + 1 :]}"
        # Every recorded field as the document gives it, then those read
        # otherwise: renumbered, re-keyed, parsed or never null.
        values: dict[str, Any] = {name: data.get(name) for name in Step.RECORD_FIELDS}
        values.update(
            kind=kind,
            parent_seq=parent_seq,
            idempotency_key=key,
            attempts=list(data.get("attempts") or []),
            tainted_by=list(data.get("tainted_by") or []),
            detail=dict(data.get("detail") or {}),
            started_at=_parse_time(data.get("started_at")),
            finished_at=_parse_time(data.get("finished_at")),
            cost_usd=_cost(data.get("cost_usd")),
        )
        rows.append(Step(task=task, seq=data["seq"], rev=revs[data["seq"]], **values))
    return rows
