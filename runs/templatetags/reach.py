from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from engine.pricing import format_usd
from infra.durations import duration_words
from infra.runtime import redactor
from runs import ports
from runs.payloads import step_payload
from runs.step_html import answer_table as _answer_table
from runs.step_html import json_text
from runs.step_html import ms as _ms
from runs.step_html import step_item as _step_item

register = template.Library()


@register.filter
def json_pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


@register.filter(name="json")
def json_compact(value: Any) -> str:
    return json_text(value)


@register.filter
def ms(value: float | None) -> str:
    return _ms(value)


@register.simple_tag
def step_item(step: Any) -> str:
    """A step's list item (:func:`runs.step_html.step_item`)."""
    return _step_item(step)


@register.simple_tag
def answer_table(value: Any) -> str:
    """A structured answer as a table (:func:`runs.step_html.answer_table`)."""
    return _answer_table(value)


@register.filter
def usd(value: float | None) -> str:
    """``$0.0123``; ``cost unknown`` for None (a model without a price)."""
    return format_usd(value)


@register.filter
def humanize_status(value: str) -> str:
    return str(value).replace("_", " ")


@register.filter
def tool_schema(snapshot: dict[str, Any] | None, name: str) -> Any:
    """The parameters schema of tool ``name`` in an agent snapshot."""
    for definition in (snapshot or {}).get("tools", []):
        if definition.get("name") == name:
            return definition.get("parameters")
    return None


@register.filter
def step_json(step: Any) -> str:
    return json.dumps(redactor().data(step_payload(step)), ensure_ascii=False, indent=2)


@register.filter
def ago(moment: datetime | None) -> str:
    """``just now``, ``40 s ago``, ``12 min ago``, ``3 h 5 min ago``, ``2 days ago``.

    The same words as the live pages' ticking clocks (``relative`` in
    ``static/js/approvals.js``), so a refreshed age reads like the rendered one.
    """
    if moment is None:
        return ""
    seconds = max(0, int((timezone.now() - moment).total_seconds()))
    return f"{duration_words(seconds)} ago" if seconds >= 5 else "just now"


@register.filter
def left(moment: datetime | None) -> str:
    """Time until ``moment`` (``12 min``); ``0 s`` once it has passed."""
    if moment is None:
        return ""
    return duration_words(max(0, int((moment - timezone.now()).total_seconds())))


# Pages of higher apps: a template links to them through these filters, never by a
# route's name (the slots in runs/ports.py name the apps that fill them).


@register.filter
def trace_url(task_id: Any) -> str:
    """The path of a task's trace page: ``{{ task.pk|trace_url }}``."""
    return ports.trace_url()(task_id)


@register.filter
def eval_report_url(report_id: Any) -> str:
    """The path of an evaluation report's page:
    ``{{ task.eval_case.report|eval_report_url }}``."""
    return ports.eval_report_url()(report_id)


@register.filter
def add_to_suite_url(task_id: Any) -> str:
    """The path of the page that makes a run an evaluation case:
    ``{{ task.pk|add_to_suite_url }}``."""
    return ports.add_to_suite_url()(task_id)
