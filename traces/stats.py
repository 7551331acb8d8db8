"""Numbers for the stats page, over the runs a user may see."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from approvals.models import ApprovalRequest
from runs.models import Step, Task

#: Statuses of calls that ran (their duration is a latency).
EXECUTED = (Step.Status.SUCCEEDED, Step.Status.FAILED, Step.Status.CACHED)

_V = TypeVar("_V")


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in 0..1); None for no values.

    The one quantile of the house: the stats page and ``/metrics`` both use it.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class ToolStats:
    tool: str
    calls: int
    failures: int
    p50_ms: float | None
    p95_ms: float | None

    @property
    def failure_rate(self) -> float:
        """Failed calls over all calls of the tool (0..1)."""
        return self.failures / self.calls if self.calls else 0.0


def tool_stats(tasks: QuerySet[Task]) -> list[ToolStats]:
    """Calls, failures and p50/p95 latency of every tool, most called first."""
    calls: dict[str, int] = defaultdict(int)
    failures: dict[str, int] = defaultdict(int)
    durations: dict[str, list[float]] = defaultdict(list)
    rows = Step.objects.filter(task__in=tasks, kind=Step.Kind.TOOL_CALL).values_list(
        "tool", "status", "started_at", "finished_at"
    )
    for tool, status, started, finished in rows.iterator(chunk_size=2000):
        name = tool or "(unknown)"
        calls[name] += 1
        if status == Step.Status.FAILED:
            failures[name] += 1
        if status in EXECUTED and started and finished:
            durations[name].append((finished - started).total_seconds() * 1000)
    return sorted(
        (
            ToolStats(
                tool=name,
                calls=count,
                failures=failures[name],
                p50_ms=percentile(durations[name], 0.5),
                p95_ms=percentile(durations[name], 0.95),
            )
            for name, count in calls.items()
        ),
        key=lambda s: (-s.calls, s.tool),
    )


def tokens_per_model_per_day(
    tasks: QuerySet[Task],
) -> tuple[list[str], list[str], dict[tuple[str, str], int]]:
    """(days, models, tokens by (day, model)) from the runs' token totals."""
    return _per_model_per_day(
        tasks, lambda row: int(row["tokens"] or 0), tokens=Sum("total_tokens")
    )


def cost_per_model_per_day(
    tasks: QuerySet[Task],
) -> tuple[list[str], list[str], dict[tuple[str, str], float | None]]:
    """(days, models, USD by (day, model)); None where no run of that model that
    day had a price (cost unknown, not $0)."""
    return _per_model_per_day(
        tasks,
        lambda row: float(row["cost"] or 0.0) if row["priced"] else None,
        cost=Sum("cost_usd"),
        priced=Count("cost_usd"),
    )


def _per_model_per_day(
    tasks: QuerySet[Task],
    value: Callable[[Mapping[str, Any]], _V],
    **aggregates: Any,
) -> tuple[list[str], list[str], dict[tuple[str, str], _V]]:
    """(days, models, ``value(row)`` by (day, model)) of the runs' ``aggregates``
    grouped by the day they were created and their model."""
    rows = (
        tasks.annotate(day=TruncDate("created_at"))
        .values("day", "model")
        .annotate(**aggregates)
        .order_by("day", "model")
    )
    cells: dict[tuple[str, str], _V] = {}
    days: list[str] = []
    models: list[str] = []
    for row in rows:
        day = row["day"].isoformat()
        if day not in days:
            days.append(day)
        if row["model"] not in models:
            models.append(row["model"])
        cells[(day, row["model"])] = value(row)
    return days, sorted(models), cells


@dataclass(frozen=True)
class UserCost:
    user: str
    runs: int
    tokens: int
    #: None when none of the user's runs had a price.
    cost_usd: float | None
    unpriced_runs: int


def top_users(tasks: QuerySet[Task], limit: int = 10) -> list[UserCost]:
    """The users whose runs cost the most (then used the most tokens)."""
    rows = (
        tasks.values("owner__username")
        .annotate(
            runs=Count("id"),
            tokens=Sum("total_tokens"),
            cost=Sum("cost_usd"),
            priced=Count("cost_usd"),
        )
        .order_by()
    )
    users = [
        UserCost(
            user=str(r["owner__username"]),
            runs=int(r["runs"]),
            tokens=int(r["tokens"] or 0),
            cost_usd=float(r["cost"]) if r["cost"] is not None else None,
            unpriced_runs=int(r["runs"]) - int(r["priced"]),
        )
        for r in rows
    ]
    users.sort(key=lambda u: (-(u.cost_usd or 0.0), -u.tokens, u.user))
    return users[:limit]


def runs_per_intent(tasks: QuerySet[Task]) -> list[tuple[str, int, float | None]]:
    """(intent, runs, USD or None when unknown) of the routed runs, most runs
    first."""
    rows = (
        tasks.exclude(intent=None)
        .values("intent")
        .annotate(n=Count("id"), cost=Sum("cost_usd"))
        .order_by("-n", "intent")
    )
    return [
        (
            str(r["intent"]),
            int(r["n"]),
            float(r["cost"]) if r["cost"] is not None else None,
        )
        for r in rows
    ]


@dataclass(frozen=True)
class VersionStats:
    """The runs of one version of one agent (registry.AgentVersion)."""

    agent: str
    version: int | None
    runs: int
    succeeded: int
    tokens: int
    cost_usd: float | None

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.runs if self.runs else 0.0


def runs_per_version(tasks: QuerySet[Task]) -> list[VersionStats]:
    """Runs, successes, tokens and cost per agent and version (None: runs from
    before versions), by agent, newest version first."""
    rows = (
        tasks.values("agent__name", "agent_version")
        .annotate(
            n=Count("id"),
            ok=Count("id", filter=Q(status=Task.Status.SUCCEEDED)),
            tokens=Sum("total_tokens"),
            cost=Sum("cost_usd"),
        )
        .order_by("agent__name", F("agent_version").desc(nulls_last=True))
    )
    return [
        VersionStats(
            agent=str(r["agent__name"]),
            version=r["agent_version"],
            runs=int(r["n"]),
            succeeded=int(r["ok"]),
            tokens=int(r["tokens"] or 0),
            cost_usd=float(r["cost"]) if r["cost"] is not None else None,
        )
        for r in rows
    ]


def stop_reasons(tasks: QuerySet[Task]) -> list[tuple[str, int]]:
    rows = (
        tasks.exclude(stop_reason=None)
        .values("stop_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "stop_reason")
    )
    return [(str(r["stop_reason"]), int(r["n"])) for r in rows]


@dataclass(frozen=True)
class ApprovalStats:
    counts: dict[str, int]
    median_decision_s: float | None
    decided: int


def approval_stats(tasks: QuerySet[Task]) -> ApprovalStats:
    """Approval outcomes and the median time from request to a human decision."""
    approvals = ApprovalRequest.objects.filter(task__in=tasks)
    counts = {
        r["status"]: r["n"]
        for r in approvals.values("status").annotate(n=Count("id")).order_by()
    }
    waits = [
        (decided - requested).total_seconds()
        for requested, decided in approvals.filter(
            status__in=[
                ApprovalRequest.Status.APPROVED,
                ApprovalRequest.Status.REJECTED,
            ],
            decided_at__isnull=False,
        ).values_list("requested_at", "decided_at")
        if decided is not None
    ]
    return ApprovalStats(
        counts=counts, median_decision_s=median(waits), decided=len(waits)
    )


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def summary(tasks: QuerySet[Task]) -> dict[str, Any]:
    totals = tasks.aggregate(
        runs=Count("id"),
        tokens=Sum("total_tokens"),
        cost=Sum("cost_usd"),
        priced=Count("cost_usd"),
    )
    runs = totals["runs"] or 0
    return {
        "runs": runs,
        "tokens": totals["tokens"] or 0,
        "cost_usd": float(totals["cost"] or 0.0) if totals["priced"] else None,
        "unpriced_runs": runs - (totals["priced"] or 0),
    }
