"""Approver routing: which route a request takes, and who its approvers are.

A route (:class:`~approvals.models.ApprovalRoute`) sets any of: a tool (and a
version of it), an agent, a risk tier, a condition on the arguments (the
approval-rule language of ``engine.safe_eval``, the one tools' approval rules
use). A request matches a route when every criterion the route sets matches.

Of the routes that match, the most specific wins. Specificity compares, in this
order (each one outranks everything after it):

1. a condition (``tool + condition`` beats ``tool``),
2. a tool, then a tool version,
3. an agent,
4. a risk tier,
5. the route's ``priority`` (higher wins), then the older route.

The route is chosen once, when the request is created, and recorded on it with
the reason (``route``, ``route_reason``). A request no route matches keeps the
rule from before routes: every holder of the approver permission decides it.

Who decides a routed request is read when asked: the route's users and the
members of its groups; once escalated, also its escalation users and groups.
An approver away now (:class:`~approvals.models.ApproverAway`) is left out, and
their delegate, if they named one, is in for as long. Delegation is one step:
a delegate who is away too delegates nothing further. The requester never
decides their own task's request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalRoute, ApproverAway
from audit.permissions import can_audit
from engine.safe_eval import EvaluationError, evaluate_rule

DECIDE_PERMISSION = "approvals.decide_approval"
#: Where the permission lives (axes' backend only checks lockouts).
PERMISSION_BACKEND = "django.contrib.auth.backends.ModelBackend"


# -- choosing a route ------------------------------------------------------------


@dataclass(frozen=True)
class Chosen:
    """The route a request takes and why, as recorded on the request."""

    route: ApprovalRoute
    reason: str


def specificity(route: ApprovalRoute) -> tuple[int, ...]:
    """The key routes are ranked by (greater is more specific; module doc)."""
    return (
        bool(route.condition.strip()),
        bool(route.tool),
        route.tool_version is not None,
        route.agent_id is not None,
        bool(route.risk),
        route.priority,
        -route.pk,
    )


def route_for(
    *,
    tool: str,
    tool_version: int | None,
    agent_id: Any,
    risk: str,
    arguments: Mapping[str, Any],
) -> Chosen | None:
    """The most specific enabled route that matches this call; None for none
    (one query)."""
    candidates = ApprovalRoute.objects.filter(
        Q(tool="") | Q(tool=tool),
        Q(tool_version__isnull=True) | Q(tool_version=tool_version),
        Q(agent__isnull=True) | Q(agent_id=agent_id),
        Q(risk="") | Q(risk=risk),
        enabled=True,
    )
    ranked = sorted(candidates, key=specificity, reverse=True)
    matching = []
    for route in ranked:
        matched, note = _condition_holds(route, arguments)
        if matched:
            matching.append((route, note))
    if not matching:
        return None
    route, note = matching[0]
    return Chosen(route, _reason(route, note, len(matching)))


def _condition_holds(
    route: ApprovalRoute, arguments: Mapping[str, Any]
) -> tuple[bool, str]:
    """Whether the route's condition holds, and what to say about it. A
    condition that cannot be evaluated routes here: the route exists to give
    these calls to the people who know them, so doubt sends them there."""
    condition = route.condition.strip()
    if not condition:
        return True, ""
    try:
        if evaluate_rule(condition, dict(arguments)):
            return True, f"{condition} holds"
    except EvaluationError as exc:
        return True, f"{condition} could not be evaluated ({exc}), so routed here"
    return False, ""


def _reason(route: ApprovalRoute, note: str, matching: int) -> str:
    criteria = []
    if route.tool:
        version = f" v{route.tool_version}" if route.tool_version is not None else ""
        criteria.append(f"tool {route.tool}{version}")
    if note:
        criteria.append(note)
    if route.agent_id is not None:
        criteria.append(f"agent {route.agent}")
    if route.risk:
        criteria.append(f"risk {route.risk}")
    said = ", ".join(criteria) or "every request"
    reason = f"Route “{route.name}”: {said}"
    if matching > 1:
        reason += f" (the most specific of {matching} matching routes)"
    return reason[:500]


# -- who decides a request ---------------------------------------------------------


def away_now(now: datetime | None = None) -> QuerySet[ApproverAway]:
    """The away periods that cover ``now``."""
    now = now or timezone.now()
    return ApproverAway.objects.filter(starts_at__lte=now, ends_at__gt=now)


def permission_holders() -> QuerySet[Any]:
    """Active holders of the approver permission, superusers included: who
    decides a request no route matched."""
    return get_user_model().objects.with_perm(
        DECIDE_PERMISSION,
        is_active=True,
        include_superusers=True,
        backend=PERMISSION_BACKEND,
    )


def route_members(route_id: Any, *, escalated: bool) -> Q:
    """Users named by the route, directly or by group (and by its escalation
    once ``escalated``), as a filter on users (no join that repeats rows)."""
    member_of = get_user_model().groups.through.objects
    named = [(ApprovalRoute.approver_users, ApprovalRoute.approver_groups)]
    if escalated:
        named.append((ApprovalRoute.escalation_users, ApprovalRoute.escalation_groups))
    found = Q(pk__in=[])
    for by_user, by_group in named:
        of_route = Q(approvalroute_id=route_id)
        groups = by_group.through.objects.filter(of_route).values("group_id")
        found |= Q(pk__in=by_user.through.objects.filter(of_route).values("user_id"))
        found |= Q(pk__in=member_of.filter(group_id__in=groups).values("user_id"))
    return found


def approvers(request: ApprovalRequest, now: datetime | None = None) -> QuerySet[Any]:
    """Who may decide ``request`` now (module doc), by id; one query."""
    users = get_user_model().objects
    if request.route_id is None:
        members = Q(pk__in=permission_holders().values("pk"))
    else:
        members = route_members(
            request.route_id, escalated=request.escalated_at is not None
        )
    away = away_now(now)
    away_members = away.filter(
        user_id__in=users.filter(members).values("pk"), delegate__isnull=False
    )
    return (
        users.filter(members | Q(pk__in=away_members.values("delegate_id")))
        .filter(is_active=True)
        .exclude(pk__in=away.values("user_id"))
        .exclude(pk=request.requested_by_id)
        .order_by("pk")
    )


# -- what one person decides -------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """What one user may see and decide of the queue, read once (a few
    queries) and then asked of every request without another.

    Agrees with :func:`approvers` by construction: the route sets here are the
    routes naming the user (or naming someone away who delegated to them).
    """

    user_id: Any
    active: bool
    auditor: bool
    #: Holds the approver permission (decides what no route took).
    holder: bool
    away: bool
    routes: frozenset[int] = frozenset()
    escalations: frozenset[int] = frozenset()
    #: Someone away who holds the permission named this user their delegate.
    delegated_default: bool = False
    away_until: datetime | None = None
    _delegated: frozenset[int] = field(default=frozenset(), repr=False)
    _delegated_escalations: frozenset[int] = field(default=frozenset(), repr=False)

    @property
    def any(self) -> bool:
        """Whether the user is an approver of anything at all (opens the queue)."""
        return self.active and bool(
            self.holder
            or self.delegated_default
            or self.routes
            or self.escalations
            or self._delegated
            or self._delegated_escalations
        )

    def named(self, request: ApprovalRequest) -> bool:
        """Whether the request is one of this user's (away or not)."""
        if request.route_id is None:
            return self.holder or self.delegated_default
        if request.route_id in self.routes | self._delegated:
            return True
        return request.escalated_at is not None and (
            request.route_id in self.escalations | self._delegated_escalations
        )

    def sees(self, request: ApprovalRequest) -> bool:
        """Whether the request shows in this user's queue (auditors: all)."""
        return self.active and (self.auditor or self.named(request))

    def decides(self, request: ApprovalRequest) -> bool:
        """Whether this user may decide the request now."""
        if not self.active or request.requested_by_id == self.user_id or self.away:
            return False
        if request.route_id is None:
            # A delegate decides only while the holder who named them is away.
            return self.holder or self.delegated_default
        return self.named(request)

    def refusal(self, request: ApprovalRequest) -> str:
        """Why this user may read ``request`` but not decide it ('' if they may)."""
        if self.decides(request):
            return ""
        if request.requested_by_id == self.user_id:
            return "You cannot decide on your own task's request."
        if self.away and self.named(request):
            until = timezone.localtime(self.away_until) if self.away_until else None
            when = f" until {until:%Y-%m-%d %H:%M}" if until else ""
            return f"You are marked away{when}: end it on the away page to decide."
        if request.route_id is None:
            return "You do not have permission to decide this request."
        return "This request is routed to other approvers; you can only read it."

    def shown(self) -> Q:
        """:meth:`sees` as a filter on requests."""
        return Q() if self.auditor else self.named_filter()

    def named_filter(self) -> Q:
        """:meth:`named` as a filter on requests."""
        shown = Q(pk__in=[])
        if self.holder or self.delegated_default:
            shown |= Q(route__isnull=True)
        if self.routes or self._delegated:
            shown |= Q(route_id__in=self.routes | self._delegated)
        escalations = self.escalations | self._delegated_escalations
        if escalations:
            shown |= Q(escalated_at__isnull=False, route_id__in=escalations)
        return shown


def reach(user: Any, now: datetime | None = None) -> Reach:
    """What ``user`` may see and decide now."""
    if not (user.is_authenticated and user.is_active):
        return Reach(
            user_id=None, active=False, auditor=False, holder=False, away=False
        )
    away = away_now(now)
    mine = away.filter(user_id=user.pk).order_by("-ends_at").first()
    delegators = (
        []
        if mine is not None
        else list(away.filter(delegate_id=user.pk).values_list("user_id", flat=True))
    )
    routes, escalations = _routes_naming([user.pk])
    delegated, delegated_escalations = _routes_naming(delegators)
    return Reach(
        user_id=user.pk,
        active=True,
        auditor=can_audit(user),
        holder=user.has_perm(DECIDE_PERMISSION),
        away=mine is not None,
        away_until=mine.ends_at if mine is not None else None,
        routes=routes,
        escalations=escalations,
        delegated_default=bool(delegators)
        and permission_holders().filter(pk__in=delegators).exists(),
        _delegated=delegated,
        _delegated_escalations=delegated_escalations,
    )


def names_anywhere(user: Any, now: datetime | None = None) -> bool:
    """Whether a route (or its escalation) names ``user``, or someone away
    named them their delegate: an approver without the permission."""
    routes, escalations = _routes_naming([user.pk])
    return (
        bool(routes or escalations)
        or away_now(now).filter(delegate_id=user.pk).exists()
    )


def _routes_naming(user_ids: Iterable[Any]) -> tuple[frozenset[int], frozenset[int]]:
    """The routes naming any of these users (directly or by group): as
    approvers, and as escalation approvers."""
    ids = list(user_ids)
    if not ids:
        return frozenset(), frozenset()
    groups = get_user_model().groups.through.objects.filter(user_id__in=ids)
    group_ids = groups.values("group_id")
    # Disabled or not: a route chosen for a request stays its route.
    named = ApprovalRoute.objects.all()
    direct = named.filter(
        Q(approver_users__in=ids) | Q(approver_groups__in=group_ids)
    ).values_list("pk", flat=True)
    escalating = named.filter(
        Q(escalation_users__in=ids) | Q(escalation_groups__in=group_ids)
    ).values_list("pk", flat=True)
    return frozenset(direct), frozenset(escalating)
