"""The built-in tools: calculate, search_notes, create_ticket, send_email."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q

from effects.models import Note, Ticket
from effects.services import effect_once, outbox_dispatch, queue_email
from engine.execution import ToolError
from engine.safe_eval import EvaluationError, evaluate_arithmetic
from engine.spec import CallContext
from registry.handlers import register

MAX_NOTES = 10


@register("calculate")
def calculate(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    expression = str(arguments["expression"])
    try:
        result = evaluate_arithmetic(expression)
    except EvaluationError as exc:
        raise ToolError(str(exc)) from exc
    return {"expression": expression, "result": result}


_WORD_SPLIT = re.compile(r"[\s,;，。；、！？!?]+")


def keyword_words(keyword: str) -> list[str]:
    """The words of a keyword; small models pass phrases, so match any word."""
    words = [w.strip("\"'“”‘’()（）") for w in _WORD_SPLIT.split(keyword)]
    return [w for w in words if w][:10]


@register("search_notes")
def search_notes(
    arguments: dict[str, Any], context: CallContext
) -> list[dict[str, str]]:
    words = keyword_words(str(arguments["keyword"]))
    if not words:
        raise ToolError("The keyword is empty. Pass one or more words to look for.")
    query = Q()
    for word in words:
        query |= Q(title__icontains=word) | Q(content__icontains=word)
    notes = Note.objects.filter(query).order_by("-created_at", "-id")[:MAX_NOTES]
    return [{"title": n.title, "content": n.content} for n in notes]


@register("create_ticket")
def create_ticket(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    def effect() -> dict[str, Any]:
        ticket = Ticket.objects.create(
            title=str(arguments["title"])[:200],
            body=str(arguments["body"]),
            idempotency_key=context.idempotency_key,
            task_id=context.task_id or None,
        )
        return {"ticket_id": ticket.pk, "title": ticket.title, "status": "created"}

    return effect_once(context=context, arguments=arguments, effect=effect)


@register("send_email")
def send_email(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
    result = effect_once(
        context=context,
        arguments=arguments,
        effect=lambda: queue_email(
            key=context.idempotency_key,
            to=str(arguments["to"]),
            subject=str(arguments["subject"]),
            body=str(arguments["body"]),
        ),
    )
    sent = outbox_dispatch(key=context.idempotency_key)
    if sent is not None:
        result = {**result, "status": sent}
    return result
