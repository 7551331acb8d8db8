"""The approval requests the queue, the API and the live queue show, and the
requests of one task as its trace shows them."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.urls import reverse

from accounts.policy import Refusal
from approvals import routing
from approvals.models import ApprovalRequest

#: The requests people see: an evaluation's are decided by its simulated
#: approver (``evals.services``), nobody else.
SHOWN_TO_PEOPLE = Q(task__eval_case__isnull=True)


def may_decide(user: Any, request: ApprovalRequest) -> bool:
    """Whether ``user`` may decide ``request`` now: one of its approvers
    (:func:`approvers_for`: its route's people, or without a route the holders
    of ``approvals.decide_approval``; not while away, a delegate in their
    place) who is not the requester. What a channel outside the queue (Slack)
    asks before it calls ``approval_decide``, which enforces the same rule.
    """
    return routing.reach(user).decides(request)


def approvers_for(request: ApprovalRequest) -> QuerySet[Any]:
    """The people who may decide ``request`` now, by id (the rule of
    :func:`may_decide`; ``approvals.routing``): whom the mail, Slack and
    webhooks tell."""
    return routing.approvers(request)


def approves_anything(user: Any) -> bool:
    """Whether ``user`` is an approver of anything: holds the permission, is
    named by a route (or its escalation), or decides for someone away. Who
    opens the queue, lists the API and listens on its socket."""
    if not (user.is_authenticated and user.is_active):
        return False
    return user.has_perm(routing.DECIDE_PERMISSION) or routing.names_anywhere(user)


def approvals_for(
    user: Any, reach: routing.Reach | None = None
) -> QuerySet[ApprovalRequest]:
    """:func:`approvals_shown` narrowed to what ``user`` sees: the requests
    they approve (their routes', their delegators', without a route when they
    hold the permission); an auditor sees every one."""
    reach = reach or routing.reach(user)
    return approvals_shown().filter(reach.shown())


def approvals_shown() -> QuerySet[ApprovalRequest]:
    """Requests with everything a card or the JSON shows: the task and its
    agent, the people, the step and the votes (no query per row); an
    evaluation's are left out (:data:`SHOWN_TO_PEOPLE`).
    """
    return _loaded(ApprovalRequest.objects.filter(SHOWN_TO_PEOPLE))


def tools_shown(reach: routing.Reach | None = None) -> list[str]:
    """The tools of the requests people see, by name (the queue's tool filter);
    with ``reach``, of those that reader sees."""
    shown = ApprovalRequest.objects.filter(SHOWN_TO_PEOPLE)
    if reach is not None:
        shown = shown.filter(reach.shown())
    return sorted(set(shown.values_list("tool", flat=True)))


def task_approvals(task: Any) -> QuerySet[ApprovalRequest]:
    """Every request of one task, oldest first, loaded as a card shows it.

    Unlike :func:`approvals_shown` it keeps an evaluation's requests: its trace
    (page, export, OpenTelemetry) shows what its simulated approver decided.
    """
    return _loaded(ApprovalRequest.objects.filter(task=task)).order_by("requested_at")


def _loaded(requests: QuerySet[ApprovalRequest]) -> QuerySet[ApprovalRequest]:
    return requests.select_related(
        "task__agent", "requested_by", "decided_by", "step", "route"
    ).prefetch_related("votes__user")


def approval_shown(approval_id: Any) -> ApprovalRequest | None:
    """One request as :func:`approvals_shown` loads it; None when unknown."""
    return approvals_shown().filter(pk=approval_id).first()


def card_refusal(
    reach: routing.Reach, approval: ApprovalRequest, second_factor: Refusal | None
) -> Refusal | None:
    """Why a card's buttons are off for this reader: the second factor first
    (it applies to every card), then the request's own rule (their own task's,
    routed to others, away); None when they may decide it."""
    if second_factor is not None:
        return second_factor
    message = reach.refusal(approval)
    if not message:
        return None
    if reach.away:
        return Refusal(message, reverse("approvals-away"), "I am back")
    return Refusal(message, "", "")
