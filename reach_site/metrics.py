"""``/metrics`` in Prometheus text format, computed from the database at scrape.

Counters are totals over the steps kept in the database; latencies are quantiles
of the last hour's steps (at most ``LATENCY_SAMPLE`` of them), nearest-rank like
the stats page's (``traces.stats.percentile``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from django.db.models import Count, Min, Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from approvals.models import ApprovalRequest
from infra.runtime import redis_client
from runs.models import Step, Task
from traces.stats import percentile

log = logging.getLogger(__name__)

LATENCY_WINDOW = timedelta(hours=1)
LATENCY_SAMPLE = 5000
QUANTILES = (0.5, 0.95)


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(name: str, value: float, **labels: object) -> str:
    if not labels:
        return f"{name} {value}"
    inner = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
    return f"{name}{{{inner}}} {value}"


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _quantiles(name: str, values: list[float], **labels: object) -> list[str]:
    """A line per quantile of ``values`` (none without values), labels first."""
    return [
        _line(name, round(value, 4), **labels, quantile=q)
        for q in QUANTILES
        if (value := percentile(values, q)) is not None
    ]


def _latencies() -> tuple[list[float], dict[str, list[float]]]:
    """Seconds of the last hour's model calls, and of tool calls per tool."""
    since = timezone.now() - LATENCY_WINDOW
    rows = (
        Step.objects.filter(
            finished_at__gte=since, started_at__isnull=False, finished_at__isnull=False
        )
        .filter(kind__in=[Step.Kind.MODEL_CALL, Step.Kind.TOOL_CALL])
        .order_by("-finished_at")
        .values_list("kind", "tool", "started_at", "finished_at")[:LATENCY_SAMPLE]
    )
    model: list[float] = []
    tools: dict[str, list[float]] = defaultdict(list)
    for kind, tool, started, finished in rows:
        seconds = (finished - started).total_seconds()
        if kind == Step.Kind.MODEL_CALL:
            model.append(seconds)
        else:
            tools[tool or ""].append(seconds)
    return model, tools


def metrics(request: HttpRequest) -> HttpResponse:
    lines = _family("reach_tasks", "gauge", "Tasks by status.")
    for row in Task.objects.values("status").annotate(n=Count("id")):
        lines.append(_line("reach_tasks", row["n"], status=row["status"]))

    lines += _family("reach_queue_depth", "gauge", "Tasks waiting for a worker.")
    queued = Task.objects.filter(status=Task.Status.QUEUED).count()
    lines.append(_line("reach_queue_depth", queued))
    try:
        broker = redis_client().llen("reach")
    except Exception:  # noqa: BLE001 - a scrape never fails on Redis
        log.warning("metrics: Redis unavailable", exc_info=True)
    else:
        lines += _family(
            "reach_broker_queue_length", "gauge", "Messages in the Celery queue."
        )
        lines.append(_line("reach_broker_queue_length", broker))

    model_calls = Step.objects.filter(kind=Step.Kind.MODEL_CALL).aggregate(
        calls=Count("id"), errors=Count("id", filter=Q(status=Step.Status.FAILED))
    )
    lines += _family("reach_model_calls_total", "counter", "Model calls.")
    lines.append(_line("reach_model_calls_total", model_calls["calls"]))
    lines += _family(
        "reach_model_errors_total", "counter", "Model calls that failed for good."
    )
    lines.append(_line("reach_model_errors_total", model_calls["errors"]))

    lines += _family(
        "reach_tool_calls_total", "counter", "Tool calls by tool and final status."
    )
    failures: dict[str, int] = defaultdict(int)
    rows = (
        Step.objects.filter(kind=Step.Kind.TOOL_CALL)
        .values("tool", "status")
        .annotate(n=Count("id"))
        .order_by("tool", "status")
    )
    for row in rows:
        lines.append(
            _line(
                "reach_tool_calls_total",
                row["n"],
                tool=row["tool"] or "",
                status=row["status"],
            )
        )
        if row["status"] == Step.Status.FAILED:
            failures[row["tool"] or ""] += row["n"]
    lines += _family("reach_tool_failures_total", "counter", "Failed tool calls.")
    for tool, count in sorted(failures.items()):
        lines.append(_line("reach_tool_failures_total", count, tool=tool))

    model_latency, tool_latency = _latencies()
    lines += _family(
        "reach_model_latency_seconds", "summary", "Model call latency, last hour."
    )
    lines += _quantiles("reach_model_latency_seconds", model_latency)
    lines.append(_line("reach_model_latency_seconds_count", len(model_latency)))
    lines += _family(
        "reach_tool_latency_seconds", "summary", "Tool call latency, last hour."
    )
    for tool, values in sorted(tool_latency.items()):
        lines += _quantiles("reach_tool_latency_seconds", values, tool=tool)

    pending = ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING)
    oldest = pending.aggregate(oldest=Min("requested_at"))["oldest"]
    age = (timezone.now() - oldest).total_seconds() if oldest else 0.0
    lines += _family(
        "reach_approvals_pending", "gauge", "Approval requests waiting for a decision."
    )
    lines.append(_line("reach_approvals_pending", pending.count()))
    lines += _family(
        "reach_approvals_oldest_age_seconds",
        "gauge",
        "Age of the oldest pending approval request.",
    )
    lines.append(_line("reach_approvals_oldest_age_seconds", round(age, 3)))
    return HttpResponse(
        "\n".join(lines) + "\n", content_type="text/plain; version=0.0.4"
    )
