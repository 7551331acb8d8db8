"""``/metrics`` in Prometheus text format.

Counters (calls, errors, finished tasks, the summaries' ``_count`` and ``_sum``)
are monotonic totals kept in Redis and bumped as steps and tasks finish
(:mod:`runs.counters`), so a purge never makes them fall and a scrape never
aggregates the Step table. Latency quantiles are nearest-rank (like the stats
page's ``traces.stats.percentile``) over the last hour's samples of each series,
at most ``runs.counters.LATENCY_SAMPLES`` of them. Gauges (tasks by status, the
queue, pending approvals) are read from the database.

Access: with ``REACH_METRICS_TOKEN`` set, only ``Authorization: Bearer <token>``;
without it, only callers from ``REACH_METRICS_ALLOWED_ADDRESSES`` (loopback by
default). The counts are no secret, but task and tool names and volumes are not
for the public either.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from approvals.models import ApprovalRequest
from infra.runtime import redis_client
from runs.counters import Counter, Totals, read_totals, recent_latencies
from runs.counters import flush as flush_counters
from runs.models import Task
from traces.stats import percentile

log = logging.getLogger(__name__)

LATENCY_WINDOW = timedelta(hours=1)
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


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """Why ``request`` may not read the metrics (None when it may)."""
    token = settings.REACH_METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        scheme, _, credentials = sent.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), token.encode()
        ):
            return None
        response = HttpResponse(
            "Send Authorization: Bearer $REACH_METRICS_TOKEN.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _address_allowed(request.META.get("REMOTE_ADDR", "")):
        return None
    return HttpResponse(
        "Metrics are served to REACH_METRICS_ALLOWED_ADDRESSES only, or with "
        "REACH_METRICS_TOKEN.\n",
        status=403,
        content_type="text/plain",
    )


def _address_allowed(address: str) -> bool:
    """Whether the peer's address is in the allow list (addresses or networks).

    The socket's peer only: a forwarded-for header is whatever the caller says.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for entry in settings.REACH_METRICS_ALLOWED_ADDRESSES:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            log.warning("metrics: %r in the allow list is no address", entry)
    return False


def _counters(totals: Totals) -> list[str]:
    lines = _family("reach_model_calls_total", "counter", "Model calls.")
    lines.append(_line("reach_model_calls_total", int(totals.get(Counter.MODEL_CALLS))))
    lines += _family(
        "reach_model_errors_total", "counter", "Model calls that failed for good."
    )
    lines.append(
        _line("reach_model_errors_total", int(totals.get(Counter.MODEL_ERRORS)))
    )
    lines += _family(
        "reach_tool_calls_total", "counter", "Tool calls by tool and final status."
    )
    for (tool, status), count in totals.series(Counter.TOOL_CALLS):
        lines.append(
            _line("reach_tool_calls_total", int(count), tool=tool, status=status)
        )
    lines += _family("reach_tool_failures_total", "counter", "Failed tool calls.")
    for (tool,), count in totals.series(Counter.TOOL_FAILURES):
        lines.append(_line("reach_tool_failures_total", int(count), tool=tool))
    lines += _family(
        "reach_tasks_finished_total",
        "counter",
        "Tasks that finished, by status and stop reason.",
    )
    for (status, reason), count in totals.series(Counter.TASKS_FINISHED):
        lines.append(
            _line(
                "reach_tasks_finished_total",
                int(count),
                status=status,
                stop_reason=reason,
            )
        )

    lines += _family(
        "reach_model_latency_seconds",
        "summary",
        "Model call latency (quantiles over the last hour).",
    )
    lines += _quantiles(
        "reach_model_latency_seconds", recent_latencies(None, LATENCY_WINDOW)
    )
    lines.append(
        _line(
            "reach_model_latency_seconds_sum",
            round(totals.get(Counter.MODEL_SECONDS), 6),
        )
    )
    lines.append(
        _line("reach_model_latency_seconds_count", int(totals.get(Counter.MODEL_TIMED)))
    )
    lines += _family(
        "reach_tool_latency_seconds",
        "summary",
        "Tool call latency (quantiles over the last hour).",
    )
    for (tool,), count in totals.series(Counter.TOOL_TIMED):
        lines += _quantiles(
            "reach_tool_latency_seconds",
            recent_latencies(tool, LATENCY_WINDOW),
            tool=tool,
        )
        seconds = totals.get(Counter.TOOL_SECONDS, tool)
        lines.append(
            _line("reach_tool_latency_seconds_sum", round(seconds, 6), tool=tool)
        )
        lines.append(_line("reach_tool_latency_seconds_count", int(count), tool=tool))
    return lines


def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    lines = _family("reach_tasks", "gauge", "Tasks by status.")
    for row in Task.objects.values("status").annotate(n=Count("id")).order_by():
        lines.append(_line("reach_tasks", row["n"], status=row["status"]))

    lines += _family("reach_queue_depth", "gauge", "Tasks waiting for a worker.")
    queued = Task.objects.filter(status=Task.Status.QUEUED).count()
    lines.append(_line("reach_queue_depth", queued))
    try:
        broker = redis_client().llen("reach")
        # What this process counted and has not sent yet (its own runs, in tests
        # and in a single-process setup) is in the totals it serves.
        flush_counters()
        counters = _counters(read_totals())
    except redis.RedisError:
        # A scrape never fails on Redis: the counters are left out (absent, not
        # zero, which Prometheus would read as a reset).
        log.warning("metrics: Redis unavailable", exc_info=True)
    else:
        lines += _family(
            "reach_broker_queue_length", "gauge", "Messages in the Celery queue."
        )
        lines.append(_line("reach_broker_queue_length", broker))
        lines += counters

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
