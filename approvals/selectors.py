"""The approval requests the queue, the API and the live queue show, and the
requests of one task as its trace shows them."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from approvals.models import ApprovalRequest

#: The requests people see: an evaluation's are decided by its simulated
#: approver (``evals.services``), nobody else.
SHOWN_TO_PEOPLE = Q(task__eval_case__isnull=True)


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
