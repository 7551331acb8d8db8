"""A step's list item on the chat and trace pages, drawn in Python.

The one drawing of a step: the pages include it (``{% step_item step %}`` in
``templates/runs/_step.html``) and a browser's socket draws every pushed step with
it. Drawn by the template language it cost about 2,500 function calls a step
(each lookup tried as a key, an attribute and an index; every filter a call);
here a few hundred (``tests/budget``). Everything shown is escaped
(every value escaped as the template's autoescape does).

``step`` is a :class:`~runs.models.Step` row or its payload
(:func:`runs.payloads.step_payload`) with ``task_id`` added: both carry the same
names.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping
from typing import Any

from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from engine.pricing import format_usd
from engine.spec import DECIDED_AS, ErrorClass, HumanDecision, StepKind, StepStatus

ESTIMATED = "The endpoint reported no usage: estimated"
TWO_APPROVERS = ' <span class="muted small">(two approvers needed)</span>'


def decided_as(decision: Any) -> str:
    """``approved``, ``rejected``, ``retried`` or ``marked done`` (anything else
    recorded on a recovery request reads as marked done)."""
    try:
        return DECIDED_AS[HumanDecision(decision)]
    except ValueError:
        return DECIDED_AS[HumanDecision.MARK_DONE]


def _e(value: Any) -> str:
    """``value`` as the template language shows ``{{ value }}``: as text,
    escaped (what :func:`django.utils.html.escape` does, without its laziness
    check, a dozen calls a value)."""
    return html.escape(str(value))


def json_text(value: Any) -> str:
    """A value as a step shows it: compact JSON, non-ASCII as it is (the
    ``json`` template filter's too)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def ms(value: float | None) -> str:
    """``840 ms``, ``2.3 s``; empty for None."""
    if value is None:
        return ""
    if value < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.1f} s"


def _plural(count: int) -> str:
    return "" if count == 1 else "s"


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 0


def _getter(step: Any) -> Callable[[str], Any]:
    if isinstance(step, Mapping):
        return step.get
    return lambda name: getattr(step, name, None)


def _kv(key: str, value_html: str, css: str = "") -> str:
    classes = f"kv {css}" if css else "kv"
    return f'<div class="{classes}"><span class="k">{key}</span>{value_html}</div>'


def step_item(step: Any) -> SafeString:
    """The step's ``<li>``: its head (kind, status, timing, cost), then what it
    did (arguments, decision, result or error; a note's text; a compaction)."""
    get = _getter(step)
    kind = str(get("kind"))
    status = str(get("status"))
    tool = get("tool")
    detail: Mapping[str, Any] = get("detail") or {}
    attempts = get("attempts")
    parts = [
        f'<li class="step kind-{_e(kind)} status-{_e(status)}" '
        f'id="step-{_e(get("task_id"))}-{_e(get("seq"))}" data-seq="{_e(get("seq"))}" '
        f'data-rev="{_e(get("rev"))}" data-kind="{_e(kind)}" '
        f'data-status="{_e(status)}"'
        + (f' data-tool="{_e(tool)}"' if tool else "")
        + ">",
        '<div class="step-head">',
        f'<span class="seq">#{_e(get("seq"))}</span> ',
        _acting(get("agent")),
        _head(kind, get, detail),
        f' <span class="badge status-{_e(status)}">'
        f"{_e(status.replace('_', ' '))}</span>",
    ]
    duration = get("duration_ms")
    if duration is not None:
        parts.append(f' <span class="muted small duration">{_e(ms(duration))}</span>')
    if _length(attempts) > 1:
        parts.append(f' <span class="muted small">{len(attempts)} attempts</span>')
    parts.append("</div>")
    parts.append(_body(kind, status, get, detail))
    if _length(attempts) > 1:
        parts.append(_attempts(attempts))
    parts.append("</li>")
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped


def _acting(agent: Any) -> str:
    """The acting agent's badge, on runs whose agent may hand off."""
    if not agent:
        return ""
    return f'<span class="badge agent" title="the acting agent">{_e(agent)}</span> '


def _head(kind: str, get: Callable[[str], Any], detail: Mapping[str, Any]) -> str:
    if kind == StepKind.MODEL_CALL:
        out = (
            '<span class="kind">model call</span> '
            f'<span class="muted small">{_e(get("model"))}</span>'
        )
        usage = get("usage") or {}
        if usage:
            estimated = usage.get("estimated")
            title = (
                ' title="The endpoint reported no usage: estimated"'
                if estimated
                else ""
            )
            out += (
                f' <span class="muted small"{title}>{"≈" if estimated else ""}'
                f"{_e(usage.get('prompt_tokens', ''))}+"
                f"{_e(usage.get('completion_tokens', ''))} tokens"
                f"{' (estimated)' if estimated else ''}</span>"
            )
        out += (
            f' <span class="muted small" data-step-cost>'
            f"{_e(format_usd(get('cost_usd')))}</span>"
        )
        route = detail.get("route")
        calls = (get("response") or {}).get("tool_calls")
        if route:
            out += f' <span class="small">→ route: {_e(route.get("intent"))}</span>'
        elif calls:
            out += (
                f' <span class="small">→ {len(calls)} tool call'
                f"{_plural(len(calls))}</span>"
            )
        elif get("status") == StepStatus.SUCCEEDED:
            out += ' <span class="small">→ answer</span>'
        withheld = detail.get("withheld")
        if withheld:  # engine.questions: a question's run went without its writes
            out += (
                ' <span class="muted small" data-withheld title="The message asks a '
                'question and asks for no action: no write tool was offered">'
                f"(a question: not offered {_e(', '.join(withheld))})</span>"
            )
        return out
    if kind == StepKind.TOOL_CALL:
        tool = _e(get("tool"))
        return f'<span class="kind">tool</span> <code class="tool">{tool}</code>'
    if kind == StepKind.NOTE:
        return '<span class="kind">note</span>'
    if kind == StepKind.GUARDRAIL:
        trip = detail.get("guardrail") or {}
        return (
            f'<span class="kind">guardrail</span> <code class="tool">'
            f"{_e(get('tool'))}</code> "
            f'<span class="small">→ {_e(trip.get("action"))} '
            f"({_e(trip.get('stage'))})</span>"
        )
    return f'<span class="kind">{_e(kind)}</span>'


def _body(
    kind: str, status: str, get: Callable[[str], Any], detail: Mapping[str, Any]
) -> str:
    if kind == StepKind.TOOL_CALL:
        return (
            f'<div class="step-body">{"".join(_call_rows(status, get, detail))}</div>'
        )
    if kind == StepKind.MODEL_CALL and get("error"):
        error = _kv("error", f"<span>{_e(get('error'))}</span>", "error")
        return f'<div class="step-body">{error}</div>'
    if kind == StepKind.NOTE:
        return f'<div class="step-body"><span>{_e(detail.get("text"))}</span></div>'
    if kind == StepKind.COMPACTION:
        return f'<div class="step-body"><span>{_compaction(detail)}</span></div>'
    if kind == StepKind.GUARDRAIL:
        trip = detail.get("guardrail") or {}
        return f'<div class="step-body">{_trip_row(trip)}</div>'
    return ""


def _trip_row(trip: Mapping[str, Any]) -> str:
    """What one guardrail found and did (engine.guards.Trip.to_json)."""
    labels = ", ".join(_e(label) for label in trip.get("labels") or ())
    reason = trip.get("reason")
    return _kv(
        "guardrail",
        f"<span><strong>{_e(trip.get('name'))}</strong> ({_e(trip.get('kind'))}) "
        f"found {labels} · {_e(trip.get('action'))}"
        f"{f': “{_e(reason)}”' if reason else ''}</span>",
        f"guardrail guardrail-{_e(trip.get('action'))}",
    )


def answer_table(value: Any) -> SafeString:
    """A structured answer as a table: an object's fields as rows, a list of
    objects as rows under their keys; everything escaped."""
    return mark_safe(_answer_html(value))  # noqa: S308 - every value is escaped


def _answer_html(value: Any) -> str:
    if isinstance(value, Mapping):
        rows = "".join(
            f"<tr><th>{_e(key)}</th><td>{_answer_html(item)}</td></tr>"
            for key, item in value.items()
        )
        return f'<table class="answer-json">{rows}</table>'
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        columns = list(dict.fromkeys(k for item in value for k in item))
        head = "".join(f"<th>{_e(c)}</th>" for c in columns)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{_answer_html(item.get(c, ''))}</td>" for c in columns)
            + "</tr>"
            for item in value
        )
        return (
            f'<table class="answer-json"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )
    if isinstance(value, list):
        return ", ".join(_answer_html(item) for item in value)
    if value is None:
        return ""
    return _e(json_text(value) if isinstance(value, bool) else value)


def _call_rows(
    status: str, get: Callable[[str], Any], detail: Mapping[str, Any]
) -> list[str]:
    rows = []
    arguments = get("arguments")
    if arguments is not None:
        rows.append(
            _kv("arguments", f'<code class="json">{_e(json_text(arguments))}</code>')
        )
    elif get("raw_arguments"):
        rows.append(
            _kv(
                "raw arguments", f'<code class="json">{_e(get("raw_arguments"))}</code>'
            )
        )
    proposed = get("proposed_arguments")
    if proposed is not None:
        rows.append(
            _kv("proposed", f'<code class="json">{_e(json_text(proposed))}</code>')
        )
    if status == StepStatus.WAITING_APPROVAL:
        approval = detail.get("approval") or {}
        unknown = get("error_class") == ErrorClass.OUTCOME_UNKNOWN
        two = _gt_one(approval.get("approvals_required"))
        rows.append(
            _kv(
                "waiting for approval",
                f"<span>{'did it happen? ' if unknown else ''}"
                f"<strong>{_e(approval.get('preview') or get('tool'))}</strong>"
                f"{TWO_APPROVERS if two else ''}</span>",
                "approval-wait",
            )
        )
    decision = detail.get("decision")
    if decision:
        said = decision.get("decision")
        reason = decision.get("reason")
        rows.append(
            _kv(
                "decision",
                f"<span>{_e(decided_as(said))} by <strong>{_e(decision.get('by'))}"
                "</strong>"
                f"{f': “{_e(reason)}”' if reason else ''}"
                f"{' · arguments edited' if decision.get('edited') else ''}</span>",
                f"decision decision-{_e(said)}",
            )
        )
    if status == StepStatus.EXPIRED:
        rows.append(
            _kv(
                "decision",
                "<span>expired: nobody decided in time, so it did not run</span>",
                "decision decision-expired",
            )
        )
    result = get("result")
    if result is not None:
        shown = Truncator(json_text(result)).chars(2000)
        rows.append(_kv("result", f'<code class="json">{_e(shown)}</code>'))
    if get("error"):
        rows.append(_kv("error", f"<span>{_e(get('error'))}</span>", "error"))
    tainted = get("tainted_by")
    if tainted:
        rows.append(
            _kv("tainted by", f"<span>{', '.join(_e(t) for t in tainted)}</span>")
        )
    for trip in detail.get("guardrail") or ():
        rows.append(_trip_row(trip))
    return rows


def _gt_one(value: Any) -> bool:
    try:
        return bool(value > 1)
    except TypeError:
        return False


def _compaction(detail: Mapping[str, Any]) -> str:
    replaced = detail.get("replaced") or {}
    count = _length(replaced)
    text = f"Shortened {count} earlier result{_plural(count)}"
    if replaced:
        text += " (" + ", ".join(f"#{_e(seq)}" for seq in replaced) + ")"
    dropped = detail.get("dropped_history_turns")
    if dropped:
        text += f" and dropped {_e(dropped)} older turn{_plural(_int(dropped))}"
    return text + (
        f" to fit the context ({_e(detail.get('estimate_before', ''))} → "
        f"{_e(detail.get('estimate_after', ''))} of {_e(detail.get('budget', ''))} "
        "tokens)."
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _attempts(attempts: list[Mapping[str, Any]]) -> str:
    items = []
    for attempt in attempts:
        error = attempt.get("error")
        outcome = (
            f" · {_e(attempt.get('error_class'))}: {_e(error)}" if error else " · ok"
        )
        items.append(
            f"<li>attempt {_e(attempt.get('number'))} · "
            f"{_e(ms(attempt.get('duration_ms')))}{outcome}</li>"
        )
    return (
        f'<ol class="attempts small muted" data-attempts="{len(attempts)}">'
        f"{''.join(items)}</ol>"
    )
