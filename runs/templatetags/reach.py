from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from infra.runtime import redactor
from runs.payloads import step_payload

register = template.Library()


@register.filter
def json_pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


@register.filter(name="json")
def json_compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return ""
    if value < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.1f} s"


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
def ago(value: Any) -> str:
    """'just now' under a minute, else Django's timesince plus 'ago'."""
    if value is None:
        return ""
    if (timezone.now() - value).total_seconds() < 60:
        return "just now"
    return f"{timesince(value)} ago"
