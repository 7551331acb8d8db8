"""Approval services: request, decide (a compare-and-swap), expire, cancel.

Lock order everywhere: the task row first, then its approvals and steps, so
deciding, cancelling and running never deadlock on PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone

from accounts import policy as sign_in
from approvals import events as approval_events
from approvals import links, routing
from approvals.models import (
    ApprovalDecision,
    ApprovalLinkUse,
    ApprovalRequest,
    ApprovalRoute,
    ApprovalVote,
    ApproverAway,
)
from approvals.selectors import SHOWN_TO_PEOPLE, approvers_for
from audit.models import AuditKind
from audit.services import audit_append
from engine.canonical import canonical_hash
from engine.planning import (
    InvalidArguments,
    decide,
    render_preview,
    validate_arguments,
)
from engine.safe_eval import EvaluationError, validate_rule
from engine.spec import (
    AgentSnapshot,
    ApprovalRecord,
    Decision,
    DecisionRecord,
    DetailKey,
    ErrorClass,
    HumanDecision,
    Risk,
    StepDetail,
    StepStatus,
    ToolSpec,
)
from infra import mail
from infra.errors import ErrorKind, ServiceError
from infra.runtime import redactor
from runs import steps as run_steps
from runs import tasks as run_tasks
from runs.models import Step, Task

DECIDE_PERMISSION = "approvals.decide_approval"
RECOVERY_REASON = (
    "the worker stopped while this call was running: whether it happened is unknown"
)


#: Decisions only a recovery request ("did it happen?") takes.
RECOVERY_DECISIONS = frozenset({ApprovalDecision.MARK_DONE, ApprovalDecision.RETRY})


class DecisionError(ServiceError):
    """A decision that cannot be taken: an invalid one unless ``kind`` says the
    caller may not (forbidden) or the request was decided meanwhile (a conflict)."""


def can_decide(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(DECIDE_PERMISSION))


def decide_refusal(
    user: Any, *, verified: bool | None = None
) -> sign_in.Refusal | None:
    """Why an approver may read the queue but not decide for want of a second
    factor (``REACH_REQUIRE_2FA`` naming approvers); None when they may.
    ``verified``: whether the user's session passed it (default: read from the
    user, see ``accounts.policy.session_verified``)."""
    return sign_in.refusal(user, role=sign_in.Role.APPROVERS, verified=verified)


def approval_create(
    *, task: Task, step: Step, recovery: bool = False
) -> ApprovalRequest:
    """Park ``step``: create its request (inside the caller's transaction)."""
    # What planning recorded; an older or imported step may lack it, and then
    # the tool's definition fills in (an unknown risk counts as a write).
    info = StepDetail(step.detail).approval or ApprovalRecord()
    spec_def = _tool_definition(task, step.tool or "")
    ttl = int(info.ttl_s or spec_def.get("approval_ttl_s") or 3600)
    now = timezone.now()
    arguments = step.arguments or {}
    risk = info.risk or spec_def.get("risk", Risk.WRITE)
    approvals_required = int(
        info.approvals_required or spec_def.get("approvals_required") or 1
    )
    chosen = _route(task, step, spec_def, risk, arguments)
    if chosen is not None:
        approvals_required = chosen.route.approvals_required
    approval = ApprovalRequest.objects.create(
        kind=ApprovalRequest.Kind.RECOVERY if recovery else ApprovalRequest.Kind.ACTION,
        task=task,
        step=step,
        tool=step.tool or "",
        risk=risk,
        arguments=arguments,
        arguments_hash=canonical_hash(arguments),
        preview=(info.preview or _preview(spec_def, arguments) or f"{step.tool}(…)")[
            :500
        ],
        reasons=(
            [RECOVERY_REASON]
            if recovery
            else list(info.reasons or ["the policy asks a human"])
        ),
        tainted_by=list(info.tainted_by),
        approvals_required=approvals_required,
        route=chosen.route if chosen else None,
        route_reason=chosen.reason if chosen else "",
        requested_by_id=task.owner_id,
        requested_at=now,
        expires_at=now + timedelta(seconds=ttl),
    )
    data = {"tool": approval.tool, "step": step.seq, "kind": approval.kind}
    if chosen is not None:
        data["route"] = chosen.route.name
    _audit(AuditKind.APPROVAL_REQUESTED, approval, actor=task.owner, data=data)
    approval_events.approval_changed_on_commit(approval.pk)
    if settings.REACH_APPROVAL_EMAILS and task.eval_case is None:
        # An evaluation's simulated approver decides: nobody is mailed.
        _email_approvers(approval)
    return approval


def _route(
    task: Task,
    step: Step,
    definition: dict[str, Any],
    risk: str,
    arguments: dict[str, Any],
) -> routing.Chosen | None:
    """The route ``step``'s request takes (``approvals.routing``); none for an
    evaluation's, which its simulated approver decides."""
    if task.eval_case is not None:
        return None
    version = step.tool_version or definition.get("version")
    return routing.route_for(
        tool=step.tool or "",
        tool_version=int(version) if version is not None else None,
        agent_id=task.agent_id,
        risk=str(risk),
        arguments=arguments,
    )


def _tool_definition(task: Task, name: str) -> dict[str, Any]:
    return AgentSnapshot.from_json(task.agent_snapshot).tool(name) or {}


def _preview(definition: dict[str, Any], arguments: dict[str, Any]) -> str:
    if not definition:
        return ""
    return render_preview(ToolSpec.from_definition(definition), arguments)


def _audit(
    kind: AuditKind,
    approval: ApprovalRequest,
    *,
    actor: Any,
    data: dict[str, Any] | None = None,
) -> None:
    """Record what happened to ``approval`` in the audit log."""
    audit_append(
        kind=kind,
        actor=actor,
        task_id=approval.task_id,
        object_type="approval",
        object_id=approval.pk,
        data=data,
    )


def _email_approvers(approval: ApprovalRequest) -> None:
    """Queue one notice per approver in the outbox (the caller's transaction).

    Never send from here or from a commit hook: this runs in the worker that
    parks the call, and a slow mail server would stall the run. The dispatcher
    sends the notices after commit, with ``EMAIL_TIMEOUT``, and retries them.
    Each notice holds what the queue's card shows and that approver's own
    decision links (``approvals.links``).
    """
    # Who may decide it, and has an address (the rule of every channel).
    approvers = approvers_for(approval).exclude(email="")
    subject = f"[Agent Reach] Approval needed: {approval.preview[:80]}"
    context = {
        "approval": approval,
        "queue_url": f"{settings.REACH_PUBLIC_URL.rstrip('/')}/approvals/",
        "recovery": approval.kind == ApprovalRequest.Kind.RECOVERY,
    }
    for user in approvers:
        body = render_to_string(
            "approvals/mail.txt",
            {
                **context,
                "approver": user.get_username(),
                "approve_url": links.link_url(approval, user, ApprovalDecision.APPROVE),
                "reject_url": links.link_url(approval, user, ApprovalDecision.REJECT),
            },
        )
        mail.outbox()(
            key=f"approval:{approval.pk}:{user.pk}",
            to=user.email,
            subject=subject,
            body=body,
            dispatch_after_commit=True,
        )


def approval_decide_by_link(
    *, token: str, approval_id: Any, user: Any, reason: str = ""
) -> ApprovalRequest:
    """Decide as a mailed link says (``approvals.links``), through
    :func:`approval_decide`, whose refusals (:class:`DecisionError`) pass through;
    :class:`~approvals.links.LinkRefused` when the link may not decide.

    The link's use is recorded in the decision's transaction: it counts only if
    the decision holds, and of two concurrent posts of one link the second is
    refused by the unique digest.
    """
    link, approval = links.link_open(token, approval_id, user)
    with transaction.atomic():
        try:
            with transaction.atomic():
                ApprovalLinkUse.objects.create(
                    token_digest=links.token_digest(token),
                    approval=approval,
                    user=user,
                    decision=link.decision,
                )
        except IntegrityError:
            raise links.used(approval) from None
        return approval_decide(
            approval=approval, user=user, decision=link.decision, reason=reason
        )


def approval_decide(
    *,
    approval: ApprovalRequest,
    user: Any,
    decision: ApprovalDecision | str,
    arguments: dict[str, Any] | None = None,
    reason: str = "",
) -> ApprovalRequest:
    """Decide a pending request. Exactly one of concurrent decisions wins.

    ``decision`` is an :class:`ApprovalDecision` (or its value): approve, reject
    or, for recovery requests, mark done or retry (``approve`` on a recovery
    request is a retry, and is recorded as one). The request records the decision
    beside the status it leads to. Raises :class:`DecisionError` (forbidden,
    invalid, or a conflict when the request was decided or expired meanwhile).
    """
    reach = routing.reach(user)
    if not reach.any:
        raise DecisionError(
            "You do not have permission to decide approvals.", ErrorKind.FORBIDDEN
        )
    # REACH_REQUIRE_2FA: every channel that decides (page, API, mail links, an
    # evaluation's simulated approver) comes through here.
    missing = decide_refusal(user)
    if missing is not None:
        raise DecisionError(missing.message, ErrorKind.FORBIDDEN)
    if decision not in ApprovalDecision.values:
        accepted = ", ".join(f"'{value}'" for value in ApprovalDecision.values)
        raise DecisionError(f"decision must be one of {accepted}.")
    decision = ApprovalDecision(decision)
    # The reason goes back to the model and into the trace: never a secret.
    reason = redactor().text((reason or "").strip())
    if decision is ApprovalDecision.REJECT and not reason:
        raise DecisionError("A reason is required to reject.")
    if user.pk == approval.requested_by_id:
        raise DecisionError(
            "You cannot decide on your own task's request.", ErrorKind.FORBIDDEN
        )
    recovery = approval.kind == ApprovalRequest.Kind.RECOVERY
    if decision in RECOVERY_DECISIONS and not recovery:
        raise DecisionError(f"{decision.value} applies to recovery requests only.")
    if recovery and decision is ApprovalDecision.APPROVE:
        # What approving "did it happen?" means: run it again.
        decision = ApprovalDecision.RETRY
    # Retry is an approval of the call as it was: votes, two-person rule and all.
    approving = decision in (ApprovalDecision.APPROVE, ApprovalDecision.RETRY)

    if recovery and arguments is not None:
        raise DecisionError(
            "A recovery request retries the call as it was; it cannot be edited."
        )

    with transaction.atomic():
        # Lock order: the task row first (see the module docstring).
        task = Task.objects.select_for_update().get(pk=approval.task_id)
        current = ApprovalRequest.objects.get(pk=approval.pk)
        if not reach.decides(current):
            # approvals.selectors.may_decide: its route's people, not away.
            raise DecisionError(reach.refusal(current), ErrorKind.FORBIDDEN)
        now = timezone.now()
        if current.status != ApprovalRequest.Status.PENDING:
            raise DecisionError(
                f"This request is already {current.status}.", ErrorKind.CONFLICT
            )
        if current.expires_at <= now:
            raise DecisionError("This request has expired.", ErrorKind.CONFLICT)

        # The model's proposal stays the reference for every edit and its diff.
        original = (
            current.proposed_arguments
            if current.proposed_arguments is not None
            else current.arguments
        )
        final_args = current.arguments
        if approving and arguments is not None:
            final_args = _validated_edit(task, current, arguments)
        final_hash = canonical_hash(final_args)
        edited = final_hash != canonical_hash(original)
        edit_fields: dict[str, Any] = {
            "arguments": final_args,
            "arguments_hash": final_hash,
            "proposed_arguments": original if edited else None,
            "diff": _diff(original, final_args) if edited else None,
        }
        if arguments is not None:
            # The card and the history describe what will run, not the proposal.
            definition = _tool_definition(task, current.tool)
            edit_fields["preview"] = (
                _preview(definition, final_args) or current.preview
            )[:500]

        if approving:
            try:
                with transaction.atomic():
                    ApprovalVote.objects.create(
                        approval=current, user=user, arguments_hash=final_hash
                    )
            except IntegrityError:
                raise DecisionError(
                    "You already approved this request.", ErrorKind.CONFLICT
                ) from None
            # Only votes for exactly these arguments count.
            votes = ApprovalVote.objects.filter(
                approval=current, arguments_hash=final_hash
            ).count()
            if votes < current.approvals_required:
                # First of two approvers: record the vote, stay pending.
                if not _swap(current, now, **edit_fields):
                    raise DecisionError(
                        "Someone else decided first.", ErrorKind.CONFLICT
                    )
                _audit(
                    AuditKind.APPROVAL_VOTED,
                    current,
                    actor=user,
                    data={"edited": edited},
                )
                approval_events.approval_changed_on_commit(current.pk)
                return ApprovalRequest.objects.get(pk=current.pk)
            status = ApprovalRequest.Status.APPROVED
        elif decision is ApprovalDecision.REJECT:
            status = ApprovalRequest.Status.REJECTED
            edit_fields = {}
        else:
            # Mark done: the call happened; approved, with nothing left to run.
            status = ApprovalRequest.Status.APPROVED
            edit_fields = {}

        won = _swap(
            current,
            now,
            status=status,
            decided_by=user,
            decided_at=now,
            reason=reason,
            decision=decision,
            **edit_fields,
        )
        if not won:
            raise DecisionError("Someone else decided first.", ErrorKind.CONFLICT)
        # The step keeps the engine's vocabulary: a retry runs as an approval.
        step_decision = ApprovalDecision.APPROVE if approving else decision
        _apply_to_step(task, current, step_decision, final_args, user, reason)
        _audit(
            AuditKind.APPROVAL_DECIDED,
            current,
            actor=user,
            data={
                "decision": decision.value,
                "edited": edited and approving,
            },
        )
        approval_events.approval_changed_on_commit(current.pk)
        run_tasks.enqueue_advance(task.pk)
    return ApprovalRequest.objects.get(pk=approval.pk)


def _swap(current: ApprovalRequest, now: Any, **changes: Any) -> bool:
    """Compare-and-swap on (status pending, version, not expired)."""
    updated = ApprovalRequest.objects.filter(
        pk=current.pk,
        status=ApprovalRequest.Status.PENDING,
        version=current.version,
        expires_at__gt=now,
    ).update(version=current.version + 1, **changes)
    return updated == 1


def _validated_edit(
    task: Task, approval: ApprovalRequest, arguments: Any
) -> dict[str, Any]:
    if not isinstance(arguments, dict):
        raise DecisionError("arguments must be a JSON object.")
    definition = _tool_definition(task, approval.tool)
    if not definition:
        raise DecisionError(f"The tool {approval.tool} is no longer defined.")
    spec = ToolSpec.from_definition(definition)
    try:
        validate_arguments(spec.parameters, arguments)
    except InvalidArguments as exc:
        raise DecisionError(str(exc)) from exc
    # What is approved, hashed and run is the same redacted object.
    cleaned: dict[str, Any] = dict(redactor().data(arguments))
    verdict = decide(spec, cleaned, tainted_by=approval.tainted_by or [])
    if verdict.decision is Decision.DENY:
        raise DecisionError(
            "The policy refuses these arguments: " + "; ".join(verdict.reasons)
        )
    return cleaned


def _diff(before: Any, after: Any) -> dict[str, Any]:
    """A field-level diff of two argument objects."""
    before = before or {}
    after = after or {}
    changes = {}
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            changes[key] = {"from": before.get(key), "to": after.get(key)}
    return changes


def _apply_to_step(
    task: Task,
    approval: ApprovalRequest,
    decision: ApprovalDecision,
    arguments: dict[str, Any],
    user: Any,
    reason: str,
) -> None:
    """Move the parked step to the decision's state (inside the decision's lock)."""
    step = Step.objects.select_for_update().get(pk=approval.step_id)
    detail = dict(step.detail or {})
    edited = False
    approve = decision is ApprovalDecision.APPROVE
    if approve and canonical_hash(arguments) != canonical_hash(step.arguments):
        # What runs is what was approved: the step carries the approved object.
        if step.proposed_arguments is None:
            step.proposed_arguments = step.arguments
        step.arguments = arguments
        edited = True
    detail[DetailKey.DECISION] = DecisionRecord(
        decision=HumanDecision(decision),
        by=user.get_username(),
        at=timezone.now().isoformat(),
        reason=reason or None,
        edited=edited or step.proposed_arguments is not None,
        approval=str(approval.pk),
        recovery=approval.kind == ApprovalRequest.Kind.RECOVERY,
    ).to_json()
    if approve:
        # The engine refuses to run anything whose hash differs from this one.
        detail[DetailKey.APPROVED_HASH] = canonical_hash(step.arguments)
        step.status = StepStatus.APPROVED
        if approval.kind == ApprovalRequest.Kind.RECOVERY:
            # Retry: the next run starts it afresh; the ledger keeps it once.
            step.started_at = None
            step.error = None
            step.error_class = None
    elif decision is ApprovalDecision.MARK_DONE:
        step.status = StepStatus.SUCCEEDED
        step.result = {
            "status": "done",
            "note": "An operator checked that this call happened.",
            "by": user.get_username(),
        }
        step.error = None
        step.error_class = None
        step.finished_at = timezone.now()
    else:
        step.status = StepStatus.REJECTED
        detail[DetailKey.REASON] = reason
        step.finished_at = timezone.now()
    run_steps.step_transition(task=task, step=step, detail=detail)


def approvals_expire() -> int:
    """Expire pending requests past their deadline; wake their tasks."""
    now = timezone.now()
    count = 0
    for approval in ApprovalRequest.objects.filter(
        status=ApprovalRequest.Status.PENDING, expires_at__lte=now
    ).only("pk", "task_id"):
        with transaction.atomic():
            task = Task.objects.select_for_update().get(pk=approval.task_id)
            won = ApprovalRequest.objects.filter(
                pk=approval.pk, status=ApprovalRequest.Status.PENDING
            ).update(status=ApprovalRequest.Status.EXPIRED, decided_at=now)
            if not won:
                continue
            step = Step.objects.select_for_update().get(pk=approval.step_id)
            run_steps.step_transition(
                task=task, step=step, status=StepStatus.EXPIRED, finished_at=now
            )
            _audit(AuditKind.APPROVAL_EXPIRED, approval, actor="system")
            approval_events.approval_changed_on_commit(approval.pk)
            run_tasks.enqueue_advance(task.pk)
            count += 1
    return count


def approvals_cancel_for_task(*, task: Task, by: Any = None) -> None:
    """Cancel the pending requests of a task (inside the caller's transaction);
    ``by``, whoever cancelled the task, is recorded as who withdrew them."""
    pending = list(
        ApprovalRequest.objects.filter(task=task, status=ApprovalRequest.Status.PENDING)
    )
    now = timezone.now()
    for approval in pending:
        ApprovalRequest.objects.filter(
            pk=approval.pk, status=ApprovalRequest.Status.PENDING
        ).update(status=ApprovalRequest.Status.CANCELLED, decided_at=now, decided_by=by)
        run_steps.step_transition(
            task=task,
            step=Step.objects.get(pk=approval.step_id),
            status=StepStatus.SKIPPED,
            error="Cancelled with the task before anyone decided.",
            error_class=ErrorClass.CANCELLED,
            finished_at=now,
        )
        approval_events.approval_changed_on_commit(approval.pk)
        _audit(AuditKind.APPROVAL_CANCELLED, approval, actor=by or "system")


# -- routing: escalation, out of office, routes ------------------------------------


def approvals_escalate(*, now: Any = None) -> int:
    """Escalate the pending requests whose route's time is up (the beat's
    ``approvals.escalate``): add the route's escalation approvers, once, tell
    them (mail, the live queue) and record it. Returns how many."""
    now = now or timezone.now()
    due = [
        approval
        for approval in ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING,
            escalated_at__isnull=True,
            route__escalate_after_minutes__isnull=False,
        ).select_related("route", "requested_by", "task")
        if approval.route is not None
        and approval.route.escalate_after_minutes is not None
        and approval.requested_at
        + timedelta(minutes=approval.route.escalate_after_minutes)
        <= now
    ]
    count = 0
    for approval in due:
        with transaction.atomic():
            won = ApprovalRequest.objects.filter(
                pk=approval.pk,
                status=ApprovalRequest.Status.PENDING,
                escalated_at__isnull=True,
            ).update(escalated_at=now)
            if not won:
                continue
            approval.escalated_at = now
            added = [user.get_username() for user in approvers_for(approval)]
            _audit(
                AuditKind.APPROVAL_ESCALATED,
                approval,
                actor="system",
                data={
                    "route": approval.route.name if approval.route else None,
                    "after_minutes": approval.route.escalate_after_minutes
                    if approval.route
                    else None,
                    "approvers": added,
                },
            )
            approval_events.approval_changed_on_commit(approval.pk)
            if settings.REACH_APPROVAL_EMAILS:
                # One notice per person and request: those told at creation
                # are not told twice (the outbox's key).
                _email_approvers(approval)
            count += 1
    return count


class AwayError(ServiceError):
    """An away period that cannot be recorded (invalid)."""


def away_problem(*, user: Any, starts_at: Any, ends_at: Any, delegate: Any) -> str:
    """What is wrong with an away period ('' when nothing is)."""
    if ends_at <= (starts_at or timezone.now()):
        return "The end of an away period must come after its start."
    if ends_at <= timezone.now():
        return "This period is already over."
    if delegate is not None and user is not None and delegate.pk == user.pk:
        return "You cannot delegate to yourself."
    if delegate is not None and not delegate.is_active:
        return "The delegate's account is not active."
    return ""


def approver_away_set(
    *,
    user: Any,
    ends_at: Any,
    starts_at: Any = None,
    delegate: Any = None,
    note: str = "",
    by: Any = None,
) -> ApproverAway:
    """Mark ``user`` away from ``starts_at`` (now) until ``ends_at``, with an
    optional ``delegate`` who decides in their place meanwhile; audited."""
    starts_at = starts_at or timezone.now()
    problem = away_problem(
        user=user, starts_at=starts_at, ends_at=ends_at, delegate=delegate
    )
    if problem:
        raise AwayError(problem)
    with transaction.atomic():
        # What they approved before: the delegate hears of what already waits.
        theirs = routing.reach(user).named_filter()
        away = ApproverAway.objects.create(
            user=user,
            starts_at=starts_at,
            ends_at=ends_at,
            delegate=delegate,
            note=(note or "").strip()[:200],
        )
        audit_append(
            kind=AuditKind.APPROVER_AWAY_SET,
            actor=by or user,
            object_type="approver_away",
            object_id=away.pk,
            data={
                "user": user.get_username(),
                "starts_at": starts_at.isoformat(),
                "ends_at": ends_at.isoformat(),
                "delegate": delegate.get_username() if delegate else None,
            },
        )
        if delegate is not None and starts_at <= timezone.now():
            _tell_delegate(theirs)
    return away


def _tell_delegate(theirs: Any) -> None:
    """Show the requests already waiting for an approver who is away now to
    their delegate: the live queue's card, and a notice (the mail's key keeps
    it to one per person and request)."""
    waiting = ApprovalRequest.objects.filter(
        theirs, SHOWN_TO_PEOPLE, status=ApprovalRequest.Status.PENDING
    ).select_related("requested_by")
    for approval in waiting:
        approval_events.approval_changed_on_commit(approval.pk)
        if settings.REACH_APPROVAL_EMAILS:
            _email_approvers(approval)


def approver_away_end(*, away: ApproverAway, by: Any = None) -> ApproverAway:
    """End an away period now (back early); audited. A period that has not
    begun yet is ended before it begins."""
    now = timezone.now()
    with transaction.atomic():
        ends_at = max(now, away.starts_at)
        ApproverAway.objects.filter(pk=away.pk, ends_at__gt=ends_at).update(
            ends_at=ends_at
        )
        away.refresh_from_db()
        audit_append(
            kind=AuditKind.APPROVER_AWAY_ENDED,
            actor=by or away.user,
            object_type="approver_away",
            object_id=away.pk,
            data={"user": away.user.get_username(), "ended_at": now.isoformat()},
        )
    return away


def route_problems(
    *, condition: str, tool: str, tool_version: Any, approvals_required: int
) -> dict[str, str]:
    """What is wrong with a route's settings, by field (the admin's check)."""
    problems: dict[str, str] = {}
    if condition.strip():
        try:
            validate_rule(condition)
        except EvaluationError as exc:
            problems["condition"] = str(exc)
    if tool_version is not None and not tool:
        problems["tool_version"] = "A tool version needs a tool."
    if approvals_required < 1:
        problems["approvals_required"] = "At least one approval."
    return problems


def route_saved(*, route: ApprovalRoute, by: Any, created: bool) -> None:
    """Audit a route's creation or change: who decides what is security state."""
    audit_append(
        kind=AuditKind.APPROVAL_ROUTE_CHANGED,
        actor=by,
        object_type="approval_route",
        object_id=route.pk,
        data={
            "created": created,
            "name": route.name,
            "enabled": route.enabled,
            "priority": route.priority,
            "tool": route.tool or None,
            "tool_version": route.tool_version,
            "agent": route.agent.name if route.agent else None,
            "risk": route.risk or None,
            "condition": route.condition or None,
            "approver_groups": sorted(g.name for g in route.approver_groups.all()),
            "approver_users": sorted(
                u.get_username() for u in route.approver_users.all()
            ),
            "approvals_required": route.approvals_required,
            "escalate_after_minutes": route.escalate_after_minutes,
            "escalation_groups": sorted(g.name for g in route.escalation_groups.all()),
            "escalation_users": sorted(
                u.get_username() for u in route.escalation_users.all()
            ),
        },
    )
