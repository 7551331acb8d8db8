"""Trace pages: the list with filters and one task's timeline."""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from agents.models import Agent, Step, Task
from agents.permissions import can_audit, visible_tasks
from approvals.models import ApprovalRequest

FILTERS = (
    "status",
    "stop_reason",
    "agent",
    "user",
    "tool",
    "since",
    "until",
    "approvals",
    "tainted",
    "q",
)


def _date(value: str, end: bool = False) -> datetime | None:
    try:
        day = datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        return None
    return timezone.make_aware(datetime.combine(day, time.max if end else time.min))


def filter_tasks(tasks: QuerySet[Task], params: Any) -> QuerySet[Task]:
    if params.get("status"):
        tasks = tasks.filter(status=params["status"])
    if params.get("stop_reason"):
        tasks = tasks.filter(stop_reason=params["stop_reason"])
    if params.get("agent"):
        tasks = tasks.filter(agent__name=params["agent"])
    if params.get("user"):
        tasks = tasks.filter(owner__username=params["user"])
    if params.get("tool"):
        tasks = tasks.filter(
            Exists(Step.objects.filter(task=OuterRef("pk"), tool=params["tool"]))
        )
    since = _date(params.get("since", ""))
    if since:
        tasks = tasks.filter(created_at__gte=since)
    until = _date(params.get("until", ""), end=True)
    if until:
        tasks = tasks.filter(created_at__lte=until)
    approvals = Exists(ApprovalRequest.objects.filter(task=OuterRef("pk")))
    if params.get("approvals") == "yes":
        tasks = tasks.filter(approvals)
    elif params.get("approvals") == "no":
        tasks = tasks.exclude(approvals)
    if params.get("tainted") == "yes":
        tasks = tasks.exclude(tainted_by=[])
    elif params.get("tainted") == "no":
        tasks = tasks.filter(tainted_by=[])
    if params.get("q"):
        query = params["q"].strip()
        tasks = tasks.filter(Q(goal__icontains=query) | Q(final_answer__icontains=query))
    return tasks


@login_required
def trace_list(request: HttpRequest) -> HttpResponse:
    tasks = filter_tasks(
        visible_tasks(request.user).select_related("agent", "owner"), request.GET
    ).order_by("-created_at")
    page = Paginator(tasks, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "traces/list.html",
        {
            "page": page,
            "filters": {k: request.GET.get(k, "") for k in FILTERS},
            "query": query.urlencode(),
            "statuses": Task.Status.values,
            "stop_reasons": Task.StopReason.values,
            "agents": Agent.objects.order_by("name"),
            "tools": sorted(
                set(Step.objects.exclude(tool=None).values_list("tool", flat=True))
            )
            if can_audit(request.user)
            else sorted(
                set(
                    Step.objects.filter(task__owner=request.user)
                    .exclude(tool=None)
                    .values_list("tool", flat=True)
                )
            ),
            "show_user": can_audit(request.user),
        },
    )


@login_required
def trace_detail(request: HttpRequest, task_id: Any) -> HttpResponse:
    task = (
        visible_tasks(request.user)
        .select_related("agent", "owner", "conversation", "parent")
        .filter(pk=task_id)
        .first()
    )
    if task is None:
        raise Http404("No such trace.")
    steps = list(task.steps.order_by("seq"))
    approvals = list(
        task.approvals.select_related("requested_by", "decided_by").prefetch_related(
            "votes__user"
        )
    )
    return render(
        request,
        "traces/detail.html",
        {
            "task": task,
            "steps": steps,
            "timeline": timeline(task, steps),
            "approvals": approvals,
            "is_owner": task.owner_id == request.user.pk,
        },
    )


def timeline(task: Task, steps: list[Step]) -> list[dict[str, Any]]:
    """Each step with its offset and width as percentages of the run's span."""
    times = [s.started_at for s in steps if s.started_at] + [
        s.finished_at for s in steps if s.finished_at
    ]
    if not times:
        return [{"step": s, "left": 0, "width": 0} for s in steps]
    start, end = min(times), max(times)
    span = max((end - start).total_seconds(), 0.001)
    rows = []
    for s in steps:
        if s.started_at is None:
            rows.append({"step": s, "left": 0, "width": 0})
            continue
        left = (s.started_at - start).total_seconds() / span * 100
        finish = s.finished_at or s.started_at
        width = max((finish - s.started_at).total_seconds() / span * 100, 0.3)
        rows.append({"step": s, "left": round(left, 2), "width": round(width, 2)})
    return rows
