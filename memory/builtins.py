"""The memory tools: remember, recall, forget (python handlers and definitions).

``seed_demo`` registers the definitions tagged ``memory`` (not ``demo``): an
operator gives an agent its memory by adding the tag to the agent's tool tags
(or choosing the tools) in the admin. ``remember`` and ``forget`` are writes
under the usual policy, so a tainted run needs approval for them; both go
through the effect ledger, so a retried call writes once. ``recall`` is
read-only; its result taints the run when it holds a tainted item.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from effects.services import effect_once
from engine.execution import ToolError, Untrusted
from engine.spec import CallContext
from memory.models import MemoryItem
from memory.services import (
    MAX_DAYS,
    MAX_SUBJECT_CHARS,
    MAX_TEXT_CHARS,
    MemoryInvalid,
    Source,
    expiry_in,
    item_brief,
    memory_forget,
    memory_recall,
    memory_write,
    recallable,
    scope_items,
    subject_key,
)
from registry.handlers import register
from runs.models import Step, Task

MEMORY_TAG = "memory"


def _subject(description: str) -> dict[str, Any]:
    """The ``subject`` parameter: the key facts are saved and forgotten under."""
    return {
        "type": "string",
        "maxLength": MAX_SUBJECT_CHARS,
        "description": description,
    }


MEMORY_TOOLS: list[dict[str, Any]] = [
    {
        "name": "remember",
        "description": (
            "Save a lasting fact about the user for later conversations (a "
            "preference, a name, a standing instruction they gave). Changes: keeps "
            "the fact; a fact on the same subject replaces the older one. Save only "
            "what the user wants kept, not one-off requests; pass days for facts "
            "that only matter for a while."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "subject": _subject("A short key, e.g. 'answer language'"),
                "fact": {
                    "type": "string",
                    "maxLength": MAX_TEXT_CHARS,
                    "description": "The fact, in one or two sentences",
                },
                "days": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_DAYS,
                    "description": "Keep it this many days (leave out: until "
                    "changed or deleted)",
                },
            },
            "required": ["subject", "fact"],
            "additionalProperties": False,
        },
        "risk": "write",
        "idempotent": True,
        "preview_template": "Remember “{subject}”: {fact}",
        "timeout_s": 5.0,
        "max_retries": 1,
    },
    {
        "name": "recall",
        "description": (
            "Look up what was saved about the user in earlier conversations. "
            "Returns the few most relevant facts, each with its subject, source "
            "and date."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words to look for, e.g. 'language preference'",
                }
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "risk": "read_only",
        "timeout_s": 5.0,
        "max_retries": 1,
    },
    {
        "name": "forget",
        "description": (
            "Stop remembering the fact saved under a subject (the user asked to "
            "forget it, or it is no longer true). Changes: the fact is no longer "
            "recalled."
        ),
        "parameters": {
            "type": "object",
            "properties": {"subject": _subject("The subject the fact was saved under")},
            "required": ["subject"],
            "additionalProperties": False,
        },
        "risk": "write",
        "idempotent": True,
        "preview_template": "Forget “{subject}”",
        "timeout_s": 5.0,
        "max_retries": 1,
    },
]


def _run(context: CallContext) -> Task:
    try:
        task = (
            Task.objects.select_related("owner", "agent")
            .filter(pk=context.task_id)
            .first()
            if context.task_id
            else None
        )
    except ValidationError:  # not a task's id
        task = None
    if task is None:
        raise ToolError("Memory tools work inside a run only.")
    return task


def _taint(task: Task, seq: int) -> list[str]:
    """What tainted the writing call: as recorded on its step, and the run's."""
    recorded = (
        Step.objects.filter(task=task, seq=seq)
        .values_list("tainted_by", flat=True)
        .first()
    )
    return list(dict.fromkeys([*(recorded or []), *(task.tainted_by or [])]))


@register("remember")
def remember(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    task = _run(context)
    try:
        expires_at = expiry_in(arguments.get("days"))
    except MemoryInvalid as exc:
        raise ToolError(str(exc)) from exc

    def effect() -> dict[str, Any]:
        try:
            item = memory_write(
                scope=MemoryItem.Scope.USER,
                user=task.owner,
                subject=str(arguments["subject"]),
                text=str(arguments["fact"]),
                expires_at=expires_at,
                source=Source.run(task, context.seq),
                tainted_by=_taint(task, context.seq),
                idempotency_key=context.idempotency_key,
            )
        except MemoryInvalid as exc:
            raise ToolError(str(exc)) from exc
        result: dict[str, Any] = {
            "status": "remembered",
            "id": item.short_id,
            "subject": item.subject,
            "fact": item.text,
            "replaces": item.supersedes.short_id if item.supersedes else None,
            "expires": item.expires_at.date().isoformat() if item.expires_at else None,
        }
        if item.tainted:
            result["tainted"] = True
        return result

    return effect_once(context=context, arguments=arguments, effect=effect)


@register("recall")
def recall(arguments: dict[str, Any], context: CallContext) -> Any:
    task = _run(context)
    query = str(arguments["query"])
    items = memory_recall(user=task.owner, agent=task.agent, query=query)
    if not items:
        return {
            "items": [],
            "note": f"Nothing remembered matches {query!r}. Try other words, or "
            "answer without it.",
        }
    result = {"items": [item_brief(item) for item in items]}
    # An item a tainted run wrote taints whoever reads it (docs/design.md "Taint").
    return Untrusted(result) if any(item.tainted for item in items) else result


@register("forget")
def forget(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    task = _run(context)
    key = subject_key(str(arguments["subject"]))

    def effect() -> dict[str, Any]:
        live = recallable(scope_items(user=task.owner), timezone.now())
        item = live.filter(subject_key=key).first() if key else None
        if item is None:
            subjects = sorted(
                {s for s in live.values_list("subject", flat=True)[:20] if s}
            )
            raise ToolError(
                f"Nothing is remembered under {arguments['subject']!r}. "
                + (
                    "Subjects remembered: " + ", ".join(subjects) + "."
                    if subjects
                    else "Nothing is remembered for this user."
                )
            )
        memory_forget(item=item, source=Source.run(task, context.seq))
        return {"status": "forgotten", "id": item.short_id, "subject": item.subject}

    return effect_once(context=context, arguments=arguments, effect=effect)
