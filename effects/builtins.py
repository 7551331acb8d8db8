"""The built-in tools: calculate, search_notes, create_ticket, send_email."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from effects import search
from effects.dispatch import outbox_dispatch
from effects.models import MailReport, Note, Ticket
from effects.services import effect_once, queue_email
from engine.execution import ToolError
from engine.formats import is_email
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


#: Candidates read before ranking: the notes table of a team, not a corpus.
MAX_CANDIDATES = 500


@register("search_notes")
def search_notes(
    arguments: dict[str, Any], context: CallContext
) -> list[dict[str, str]]:
    keyword = str(arguments["keyword"])
    words = search.terms(keyword)
    if not words:
        raise ToolError("The keyword is empty. Pass one or more words to look for.")
    query = Q()
    for word in words:
        query |= Q(title__icontains=word) | Q(content__icontains=word)
    candidates = list(
        Note.objects.filter(query)
        .order_by("-created_at", "-id")
        .values_list("title", "content")[:MAX_CANDIDATES]
    )
    order = search.rank(words, candidates)[:MAX_NOTES]
    if not order:
        raise ToolError(
            f"Nothing matched: no note mentions any word of {keyword!r}. Search "
            "again with other words (one name or term works best; the notes may be "
            "written in another language), or tell the user the notes do not say."
        )
    return [{"title": candidates[i][0], "content": candidates[i][1]} for i in order]


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
    # The seeded schema says so too ("format": "email"), but an older or edited
    # definition may not: a list or a name is never handed to the mail server.
    if not is_email(str(arguments["to"])):
        raise ToolError(
            f"to: one email address, e.g. ops@example.com (got {arguments['to']!r})."
        )

    def effect() -> dict[str, Any]:
        # Dispatched right below, once the ledger's transaction has committed.
        row = queue_email(
            key=context.idempotency_key,
            to=str(arguments["to"]),
            subject=str(arguments["subject"]),
            body=str(arguments["body"]),
        )
        return {
            "status": MailReport.QUEUED.value,
            "to": row.to,
            "message_id": row.message_id,
        }

    result = effect_once(context=context, arguments=arguments, effect=effect)
    sent = outbox_dispatch(key=context.idempotency_key)
    if sent is not None:
        result = {**result, "status": sent}
    return result
