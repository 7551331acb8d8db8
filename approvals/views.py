"""The approval queue page (``/approvals/``) and its history."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.models import Agent
from approvals.models import ApprovalRequest
from approvals.services import can_decide

FILTERS = ("tool", "risk", "agent", "user", "tainted")


def _filtered(request: HttpRequest, approvals):  # type: ignore[no-untyped-def]
    params = request.GET
    if params.get("tool"):
        approvals = approvals.filter(tool=params["tool"])
    if params.get("risk"):
        approvals = approvals.filter(risk=params["risk"])
    if params.get("agent"):
        approvals = approvals.filter(task__agent__name=params["agent"])
    if params.get("user"):
        approvals = approvals.filter(requested_by__username=params["user"])
    if params.get("tainted") == "yes":
        approvals = approvals.exclude(tainted_by=[])
    elif params.get("tainted") == "no":
        approvals = approvals.filter(tainted_by=[])
    return approvals


def _base():  # type: ignore[no-untyped-def]
    return ApprovalRequest.objects.select_related(
        "task__agent", "task__conversation", "requested_by", "decided_by", "step"
    ).prefetch_related("votes__user")


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    if not can_decide(request.user):
        raise PermissionDenied
    pending = _filtered(
        request, _base().filter(status=ApprovalRequest.Status.PENDING)
    ).order_by("requested_at")
    return render(
        request,
        "approvals/queue.html",
        {
            "approvals": pending,
            "filters": {k: request.GET.get(k, "") for k in FILTERS},
            "tools": sorted(set(ApprovalRequest.objects.values_list("tool", flat=True))),
            "agents": Agent.objects.order_by("name"),
            "risks": ["read_only", "write", "irreversible"],
        },
    )


@login_required
def history(request: HttpRequest) -> HttpResponse:
    if not can_decide(request.user):
        raise PermissionDenied
    decided = _filtered(
        request, _base().exclude(status=ApprovalRequest.Status.PENDING)
    ).order_by("-decided_at", "-requested_at")
    page = Paginator(decided, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "approvals/history.html",
        {
            "page": page,
            "filters": {k: request.GET.get(k, "") for k in FILTERS},
            "tools": sorted(set(ApprovalRequest.objects.values_list("tool", flat=True))),
            "agents": Agent.objects.order_by("name"),
            "risks": ["read_only", "write", "irreversible"],
        },
    )
