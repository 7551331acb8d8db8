"""The approval requests the queue, the API and the live queue show, and the
requests of one task as its trace shows them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from approvals.models import ApprovalRequest

#: The requests people see: an evaluation's are decided by its simulated
#: approver (``evals.services``), nobody else.
SHOWN_TO_PEOPLE = Q(task__eval_case__isnull=True)


def may_decide(user: Any, request: ApprovalRequest) -> bool:
    """Whether ``user`` may decide ``request``: an approver
    (``approvals.decide_approval``, ``approvals.services.DECIDE_PERMISSION``) who
    is not the requester. What a channel outside the queue (Slack) asks before
    it calls ``approval_decide``, which enforces the same rule.
    """
    return bool(
        user.is_authenticated
        and user.is_active
        and user.has_perm("approvals.decide_approval")
        and user.pk != request.requested_by_id
    )


def approvers_for(request: ApprovalRequest) -> QuerySet[Any]:
    """The people who may decide ``request``, by id: active approvers (and
    superusers) other than its requester (the rule of :func:`may_decide`)."""
    return (
        get_user_model()
        .objects.with_perm(
            "approvals.decide_approval",
            is_active=True,
            include_superusers=True,
            # The backend that holds permissions (axes' only checks lockouts).
            backend="django.contrib.auth.backends.ModelBackend",
        )
        .exclude(pk=request.requested_by_id)
        .order_by("pk")
    )


def approvals_shown() -> QuerySet[ApprovalRequest]:
    """Requests with everything a card or the JSON shows: the task and its
    agent, the people, the step and the votes (no query per row); an
    evaluation's are left out (:data:`SHOWN_TO_PEOPLE`).
    """
    return _loaded(ApprovalRequest.objects.filter(SHOWN_TO_PEOPLE))


def tools_shown() -> list[str]:
    """The tools of the requests people see, by name (the queue's tool filter)."""
    shown = ApprovalRequest.objects.filter(SHOWN_TO_PEOPLE)
    return sorted(set(shown.values_list("tool", flat=True)))


def task_approvals(task: Any) -> QuerySet[ApprovalRequest]:
    """Every request of one task, oldest first, loaded as a card shows it.

    Unlike :func:`approvals_shown` it keeps an evaluation's requests: its trace
    (page, export, OpenTelemetry) shows what its simulated approver decided.
    """
    return _loaded(ApprovalRequest.objects.filter(task=task)).order_by("requested_at")


def _loaded(requests: QuerySet[ApprovalRequest]) -> QuerySet[ApprovalRequest]:
    return requests.select_related(
        "task__agent", "requested_by", "decided_by", "step"
    ).prefetch_related("votes__user")


def approval_shown(approval_id: Any) -> ApprovalRequest | None:
    """One request as :func:`approvals_shown` loads it; None when unknown."""
    return approvals_shown().filter(pk=approval_id).first()
