"""The approval queue page (``/approvals/``), the history of decisions, the
confirmation page a mailed decision link opens (``approvals.links``), and the
away page (``/approvals/away/``) where an approver marks themselves out of
office.

Built like the admin's change list: the view hands one presenter object to the
template, and each request renders through ``approvals/_card.html`` — the same
partial the live queue pushes, so a card that arrives live looks like the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from accounts.policy import Refusal
from approvals import routing
from approvals.links import Link, LinkRefused, link_open
from approvals.models import ApprovalDecision, ApprovalRequest, ApproverAway
from approvals.selectors import (
    approvals_for,
    approves_anything,
    card_refusal,
    tools_shown,
)
from approvals.services import (
    AwayError,
    DecisionError,
    approval_decide_by_link,
    approver_away_end,
    approver_away_set,
    decide_refusal,
)
from audit.permissions import can_audit
from infra.api.errors import http_status
from infra.errors import ErrorKind
from registry.models import Agent, Tool
from runs.selectors import filter_equal, filter_tainted

FILTERS = ("tool", "risk", "agent", "user", "tainted")
RISKS = tuple(Tool.Risk.values)
HISTORY_PAGE_SIZE = 50
RECENT_DECISIONS = 10


@dataclass
class QueuePresenter:
    """Everything the queue and history templates show, computed once."""

    filters: dict[str, str]
    tools: list[str]
    agents: list[str]
    risks: tuple[str, ...] = RISKS
    statuses: tuple[str, ...] = ()
    show_trace: bool = False
    pending: list[ApprovalRequest] = field(default_factory=list)
    recent: list[ApprovalRequest] = field(default_factory=list)
    page: Page[ApprovalRequest] | None = None
    query: str = ""
    #: Why this approver may read but not decide (REACH_REQUIRE_2FA), or None.
    decide_refusal: Refusal | None = None
    #: The reader's away period now (approvals.routing), if any.
    away_until: Any = None

    @property
    def filtered(self) -> bool:
        return any(self.filters.values())


def _filtered(
    params: QueryDict, approvals: QuerySet[ApprovalRequest]
) -> QuerySet[ApprovalRequest]:
    approvals = filter_equal(
        approvals,
        params,
        {"tool": "tool", "risk": "risk", "agent": "task__agent__name"},
    )
    user = str(params.get("user") or "").strip()
    if user:
        approvals = approvals.filter(requested_by__username=user)
    approvals = filter_tainted(approvals, params.get("tainted"))
    if params.get("status") in ApprovalRequest.Status.values:
        approvals = approvals.filter(status=params["status"])
    return approvals


def _presenter(
    request: HttpRequest, reach: routing.Reach, **extra: Any
) -> QueuePresenter:
    return QueuePresenter(
        filters={k: request.GET.get(k, "") for k in FILTERS},
        tools=tools_shown(reach),
        agents=list(Agent.objects.order_by("name").values_list("name", flat=True)),
        show_trace=can_audit(request.user),
        **extra,
    )


def _require_approver(request: HttpRequest) -> routing.Reach:
    """What the reader approves (approvals.routing); 403 for no approver."""
    if not approves_anything(request.user):
        raise PermissionDenied("Only approvers see the approval queue.")
    return routing.reach(request.user)


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    """Pending requests the reader approves, oldest first, then the latest
    decisions of those."""
    reach = _require_approver(request)
    shown = approvals_for(request.user, reach)
    pending = list(
        _filtered(
            request.GET, shown.filter(status=ApprovalRequest.Status.PENDING)
        ).order_by("requested_at")
    )
    second_factor = decide_refusal(request.user)
    for approval in pending:
        # Per card: an auditor reads requests routed to others.
        approval.decide_refusal = card_refusal(reach, approval, second_factor)
    recent = _filtered(
        request.GET, shown.exclude(status=ApprovalRequest.Status.PENDING)
    ).order_by("-decided_at", "-requested_at")[:RECENT_DECISIONS]
    page = _presenter(
        request,
        reach,
        pending=pending,
        recent=list(recent),
        decide_refusal=second_factor,
        away_until=reach.away_until,
    )
    return render(request, "approvals/queue.html", {"page": page})


@login_required
def history(request: HttpRequest) -> HttpResponse:
    """Decided requests, newest decision first: who, when, why, and the edit."""
    reach = _require_approver(request)
    decided = _filtered(
        request.GET,
        approvals_for(request.user, reach).exclude(
            status=ApprovalRequest.Status.PENDING
        ),
    ).order_by("-decided_at", "-requested_at")
    query = request.GET.copy()
    query.pop("page", None)
    page = _presenter(
        request,
        reach,
        page=Paginator(decided, HISTORY_PAGE_SIZE).get_page(request.GET.get("page")),
        statuses=tuple(
            s
            for s in ApprovalRequest.Status.values
            if s != ApprovalRequest.Status.PENDING
        ),
        query=query.urlencode(),
    )
    page.filters["status"] = request.GET.get("status", "")
    return render(request, "approvals/history.html", {"page": page})


@dataclass
class ConfirmPresenter:
    """What the confirmation page of one mailed link shows."""

    approval: ApprovalRequest
    link: Link
    token: str
    decide_refusal: Refusal | None = None
    #: Why the posted decision was refused (the form stays).
    error: str = ""
    #: The reason as typed, kept when the post is refused.
    reason: str = ""
    #: The decision was taken: the page says what became of the request.
    done: bool = False

    @property
    def rejecting(self) -> bool:
        return self.link.decision is ApprovalDecision.REJECT

    @property
    def recovery(self) -> bool:
        return self.approval.kind == ApprovalRequest.Kind.RECOVERY


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def confirm(request: HttpRequest, approval_id: Any) -> HttpResponse:
    """The page a mailed approve or reject link opens: GET shows the request and
    a form (mail scanners follow links, so opening one decides nothing); POST
    decides, as the signed-in approver the link was made for."""
    token = str(request.POST.get("t") or request.GET.get("t") or "")
    try:
        link, approval = link_open(token, approval_id, request.user)
    except LinkRefused as refused:
        return _link_refused(request, refused)
    page = ConfirmPresenter(
        approval=approval,
        link=link,
        token=token,
        decide_refusal=decide_refusal(request.user),
    )
    if request.method == "GET":
        return render(request, "approvals/confirm.html", {"page": page})
    page.reason = str(request.POST.get("reason") or "")
    try:
        page.approval = approval_decide_by_link(
            token=token, approval_id=approval_id, user=request.user, reason=page.reason
        )
    except LinkRefused as refused:
        return _link_refused(request, refused)
    except DecisionError as error:
        if error.kind is ErrorKind.CONFLICT:
            # Decided or expired meanwhile: the refusal says by whom and when.
            try:
                link_open(token, approval_id, request.user)
            except LinkRefused as refused:
                return _link_refused(request, refused)
        page.error = error.message
        return render(
            request,
            "approvals/confirm.html",
            {"page": page},
            status=http_status(error),
        )
    page.done = True
    return render(request, "approvals/confirm.html", {"page": page})


def _link_refused(request: HttpRequest, refused: LinkRefused) -> HttpResponse:
    return render(
        request,
        "approvals/link_refused.html",
        {"refused": refused, "approval": refused.approval},
        status=http_status(refused),
    )


class AwayForm(forms.Form):
    """An approver's out of office: until when, and who decides meanwhile."""

    starts_at = forms.DateTimeField(
        label="From",
        required=False,
        help_text="Blank: now.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    ends_at = forms.DateTimeField(
        label="Until", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    delegate = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        to_field_name="username",
        help_text="Decides your requests and is told of them while you are away.",
    )
    note = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["delegate"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = (
            get_user_model()
            .objects.filter(is_active=True)
            .exclude(pk=user.pk)
            .order_by("username")
        )


@login_required
def away(request: HttpRequest) -> HttpResponse:
    """Mark yourself away (out of office), with a delegate; end it when back."""
    _require_approver(request)
    user = request.user
    form = AwayForm(user=user)
    if request.method == "POST":
        ending = request.POST.get("end")
        if ending:
            period = get_object_or_404(ApproverAway, pk=ending, user=user)
            approver_away_end(away=period, by=user)
            messages.success(request, "Welcome back: you are no longer away.")
            return redirect("approvals-away")
        form = AwayForm(request.POST, user=user)
        if form.is_valid():
            try:
                approver_away_set(
                    user=user,
                    starts_at=form.cleaned_data["starts_at"],
                    ends_at=form.cleaned_data["ends_at"],
                    delegate=form.cleaned_data["delegate"],
                    note=form.cleaned_data["note"],
                    by=user,
                )
            except AwayError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, "You are marked away.")
                return redirect("approvals-away")
    periods = ApproverAway.objects.filter(
        user=user, ends_at__gt=timezone.now()
    ).select_related("delegate")
    return render(
        request,
        "approvals/away.html",
        {"form": form, "periods": list(periods), "now": timezone.now()},
    )
