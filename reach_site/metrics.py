"""``/metrics`` in Prometheus text format, computed from the database at scrape."""

from __future__ import annotations

from django.db.models import Avg, Count, Min, Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from agents.models import Step, Task
from approvals.models import ApprovalRequest


def _line(name: str, value: float, **labels: str) -> str:
    if labels:
        inner = ",".join(
            f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
            for k, v in labels.items()
        )
        return f"{name}{{{inner}}} {value}"
    return f"{name} {value}"


def metrics(request: HttpRequest) -> HttpResponse:
    lines = [
        "# HELP reach_tasks Tasks by status.",
        "# TYPE reach_tasks gauge",
    ]
    for row in Task.objects.values("status").annotate(n=Count("id")):
        lines.append(_line("reach_tasks", row["n"], status=row["status"]))
    queued = Task.objects.filter(status=Task.Status.QUEUED).count()
    lines += [
        "# HELP reach_queue_depth Tasks waiting for a worker.",
        "# TYPE reach_queue_depth gauge",
        _line("reach_queue_depth", queued),
    ]
    try:
        from agents.services.runtime import redis_client

        broker = redis_client().llen("reach")
        lines += [
            "# HELP reach_broker_queue_length Messages in the Celery queue.",
            "# TYPE reach_broker_queue_length gauge",
            _line("reach_broker_queue_length", broker),
        ]
    except Exception:  # noqa: BLE001
        pass
    lines += [
        "# HELP reach_tool_calls_total Tool calls by tool and outcome.",
        "# TYPE reach_tool_calls_total counter",
    ]
    tool_rows = (
        Step.objects.filter(kind=Step.Kind.TOOL_CALL)
        .values("tool", "status")
        .annotate(n=Count("id"))
    )
    for row in tool_rows:
        lines.append(
            _line("reach_tool_calls_total", row["n"], tool=row["tool"] or "", status=row["status"])
        )
    model = Step.objects.filter(kind=Step.Kind.MODEL_CALL).aggregate(
        calls=Count("id"),
        errors=Count("id", filter=Q(status=Step.Status.FAILED)),
    )
    lines += [
        "# HELP reach_model_calls_total Model calls.",
        "# TYPE reach_model_calls_total counter",
        _line("reach_model_calls_total", model["calls"]),
        "# HELP reach_model_errors_total Model calls that failed for good.",
        "# TYPE reach_model_errors_total counter",
        _line("reach_model_errors_total", model["errors"]),
    ]
    pending = ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING)
    oldest = pending.aggregate(oldest=Min("requested_at"))["oldest"]
    age = (timezone.now() - oldest).total_seconds() if oldest else 0
    lines += [
        "# HELP reach_approvals_pending Approval requests waiting for a decision.",
        "# TYPE reach_approvals_pending gauge",
        _line("reach_approvals_pending", pending.count()),
        "# HELP reach_approvals_oldest_age_seconds Age of the oldest pending request.",
        "# TYPE reach_approvals_oldest_age_seconds gauge",
        _line("reach_approvals_oldest_age_seconds", round(age, 3)),
    ]
    _ = Avg
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
