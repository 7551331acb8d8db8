"""Slack interactions: a click on Approve or Reject, and the reject modal's reason.

Checked in this order, each refusal audited (``slack.interaction_refused``):
the timestamp (older or newer than five minutes: stale), the signature
(``slack_sdk.signature.SignatureVerifier`` over the raw body: forged), a request
seen before (the same timestamp and signature: replayed), then the Slack user:
their confirmed e-mail (``users.info``) must be one active product user's, who
may decide this request (``approvals.selectors.may_decide``). The decision goes
through ``approvals.services.approval_decide``, the queue's service; when
someone decided first, the clicker is told who.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from slack_sdk.signature import SignatureVerifier

from approvals.models import ApprovalDecision, ApprovalRequest
from approvals.selectors import approvals_shown, may_decide
from approvals.services import DecisionError, approval_decide
from audit.models import AuditKind
from audit.services import audit_append
from infra.errors import ErrorKind
from notify import slack
from notify.models import SlackRequestSeen

log = logging.getLogger(__name__)

#: How far a request's timestamp may be from now (Slack's rule).
MAX_AGE_S = 5 * 60
#: No signing secret: there is no Slack integration to refuse anything for.
NOT_CONFIGURED = "not_configured"


@dataclass
class Answer:
    """What the endpoint answers Slack: an HTTP status and a JSON body."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


class Refused(Exception):
    def __init__(self, reason: str, message: str, status: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status


def slack_interaction(
    *, body: bytes, timestamp: str | None, signature: str | None
) -> Answer:
    """Verify and act on one interaction request from Slack."""
    try:
        payload = _verified_payload(body, timestamp, signature)
    except Refused as exc:
        if exc.reason != NOT_CONFIGURED:
            _refused(exc.reason, exc.message)
        return Answer(exc.status, {"ok": False, "error": exc.message})
    kind = payload.get("type")
    if kind == "block_actions":
        return _on_action(payload)
    if kind == "view_submission":
        return _on_reject_reason(payload)
    return Answer(200, {"ok": True, "ignored": str(kind)})


def _verified_payload(
    body: bytes, timestamp: str | None, signature: str | None
) -> dict[str, Any]:
    try:
        secret = slack.signing_secret()
    except slack.SlackNotConfigured as exc:
        # No Slack integration here at all: nothing to answer for.
        raise Refused(NOT_CONFIGURED, str(exc), 404) from exc
    if not timestamp or not signature:
        raise Refused(
            "unsigned", "The request carries no Slack signature or timestamp.", 401
        )
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise Refused("forged", "The Slack timestamp is not a number.", 401) from None
    if abs(time.time() - sent_at) > MAX_AGE_S:
        raise Refused(
            "stale", "The Slack timestamp is more than five minutes off: refused.", 401
        )
    if not SignatureVerifier(secret).is_valid(body, timestamp, signature):
        raise Refused("forged", "The Slack signature does not match.", 401)
    key = hashlib.sha256(f"{timestamp}:{signature}".encode()).hexdigest()
    try:
        with transaction.atomic():
            SlackRequestSeen.objects.create(key=key, timestamp=sent_at)
    except IntegrityError:
        raise Refused(
            "replayed", "This Slack request was already received: refused.", 409
        ) from None
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
        payload = json.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
        raise Refused("malformed", "The body holds no JSON payload.", 400) from exc
    if not isinstance(payload, dict):
        raise Refused("malformed", "The payload is not a JSON object.", 400)
    return payload


def _refused(
    reason: str,
    message: str,
    *,
    slack_user: str = "",
    approval: ApprovalRequest | None = None,
    actor: Any = "slack",
) -> None:
    audit_append(
        kind=AuditKind.SLACK_INTERACTION_REFUSED,
        actor=actor,
        task_id=approval.task_id if approval else "",
        object_type="approval" if approval else "",
        object_id=approval.pk if approval else "",
        data={"reason": reason, "message": message, "slack_user": slack_user or None},
    )


@dataclass
class _Context:
    """Who clicked where, about which request."""

    slack_user: str
    channel: str
    ts: str
    approval: ApprovalRequest
    web: Any
    user: Any = None


def _context(
    payload: dict[str, Any], approval_id: str, channel: str, ts: str
) -> _Context | Answer:
    """The clicker as a product user who may decide, or the refusal's answer."""
    slack_user = str((payload.get("user") or {}).get("id") or "")
    approval = _approval(approval_id)
    if approval is None:
        message = "Agent Reach knows no such request."
        _refused("unknown_request", message, slack_user=slack_user)
        return Answer(200, {"ok": False, "error": message})
    try:
        web = slack.client()
        email = slack.verified_email(web, slack_user=slack_user)
    except (slack.SlackNotConfigured, slack.SlackCallFailed) as exc:
        message = f"Could not ask Slack who you are ({exc}); nothing was decided."
        _refused("slack_unavailable", message, slack_user=slack_user, approval=approval)
        return Answer(200, {"ok": False, "error": message})
    context = _Context(slack_user, channel, ts, approval, web)
    users = (
        list(get_user_model().objects.filter(email__iexact=email, is_active=True)[:2])
        if email
        else []
    )
    if len(users) != 1:
        message = (
            "No Agent Reach account has your confirmed Slack e-mail address"
            if not users
            else "More than one Agent Reach account has your Slack e-mail address"
        ) + ": nothing was decided. Decide in Agent Reach instead."
        return _refuse_in_slack(context, "unknown_user", message)
    context.user = users[0]
    if not may_decide(context.user, approval):
        message = (
            "You cannot decide on your own task's request."
            if context.user.pk == approval.requested_by_id
            else "You are not an approver of this request: nothing was decided."
        )
        return _refuse_in_slack(context, "not_an_approver", message)
    return context


def _refuse_in_slack(context: _Context, reason: str, message: str) -> Answer:
    _refused(
        reason,
        message,
        slack_user=context.slack_user,
        approval=context.approval,
        actor=context.user or "slack",
    )
    _tell(context, message)
    return Answer(200, {"ok": False, "error": message})


def _tell(context: _Context, text: str) -> None:
    if context.channel:
        slack.tell(
            context.web, channel=context.channel, user=context.slack_user, text=text
        )


def _approval(approval_id: str) -> ApprovalRequest | None:
    try:
        return approvals_shown().filter(pk=approval_id).first()
    except (ValidationError, ValueError):
        return None  # not an id at all


def _on_action(payload: dict[str, Any]) -> Answer:
    actions = payload.get("actions") or []
    if not actions or not isinstance(actions[0], dict):
        return Answer(400, {"ok": False, "error": "No action in the payload."})
    action = actions[0]
    action_id = action.get("action_id")
    if action_id == slack.OPEN_ACTION:
        return Answer(200, {"ok": True})  # a link: Slack opened it
    if action_id not in (slack.APPROVE_ACTION, slack.REJECT_ACTION):
        return Answer(200, {"ok": True, "ignored": str(action_id)})
    container = payload.get("container") or {}
    channel = str(
        container.get("channel_id") or (payload.get("channel") or {}).get("id") or ""
    )
    ts = str(
        container.get("message_ts") or (payload.get("message") or {}).get("ts") or ""
    )
    found = _context(payload, str(action.get("value") or ""), channel, ts)
    if isinstance(found, Answer):
        return found
    context = found
    if action_id == slack.APPROVE_ACTION:
        return _decide(context, ApprovalDecision.APPROVE, reason="")
    if not context.approval.is_pending:
        return _too_late(context, "reject")
    try:
        slack.call(
            context.web.views_open,
            trigger_id=str(payload.get("trigger_id") or ""),
            view=slack.reject_modal(context.approval, channel=channel, ts=ts),
        )
    except slack.SlackCallFailed as exc:
        message = f"Could not open the reason form ({exc}); reject in Agent Reach."
        _tell(context, message)
        return Answer(200, {"ok": False, "error": message})
    return Answer(200, {"ok": True, "opened": "reject_reason"})


def _on_reject_reason(payload: dict[str, Any]) -> Answer:
    view = payload.get("view") or {}
    if view.get("callback_id") != slack.REJECT_VIEW:
        return Answer(200, {"ok": True, "ignored": str(view.get("callback_id"))})
    approval_id, _, rest = str(view.get("private_metadata") or "").partition("|")
    channel, _, ts = rest.partition("|")
    values = (view.get("state") or {}).get("values") or {}
    reason = str(
        ((values.get(slack.REASON_BLOCK) or {}).get(slack.REASON_INPUT) or {}).get(
            "value"
        )
        or ""
    ).strip()
    found = _context(payload, approval_id, channel, ts)
    if isinstance(found, Answer):
        return _modal_error(found.body.get("error", "Refused."))
    answer = _decide(found, ApprovalDecision.REJECT, reason=reason)
    if answer.body.get("ok"):
        return Answer(200, {"response_action": "clear", **answer.body})
    return _modal_error(answer.body.get("error", "Refused."))


def _modal_error(message: str) -> Answer:
    return Answer(
        200,
        {
            "response_action": "errors",
            "errors": {slack.REASON_BLOCK: message[:150]},
            "ok": False,
            "error": message,
        },
    )


def _decide(context: _Context, decision: ApprovalDecision, *, reason: str) -> Answer:
    try:
        decided = approval_decide(
            approval=context.approval,
            user=context.user,
            decision=decision,
            reason=reason,
        )
    except DecisionError as exc:
        if exc.kind is ErrorKind.CONFLICT:
            return _too_late(context, decision.value)
        return _refuse_in_slack(context, "decision_refused", exc.message)
    audit_append(
        kind=AuditKind.SLACK_INTERACTION,
        actor=context.user,
        task_id=decided.task_id,
        object_type="approval",
        object_id=decided.pk,
        data={"action": decision.value, "slack_user": context.slack_user},
    )
    decided = approvals_shown().get(pk=decided.pk)
    if decided.is_pending:
        text = (
            f"Your approval is recorded ({decided.votes.count()} of "
            f"{decided.approvals_required}): it waits for another approver."
        )
    else:
        text = f"Done. {slack.outcome_text(decided)}"
    _tell(context, text)
    return Answer(200, {"ok": True, "status": decided.status, "message": text})


def _too_late(context: _Context, tried: str) -> Answer:
    """Someone decided first: say who, and what."""
    current = approvals_shown().get(pk=context.approval.pk)
    text = f"Too late to {tried}: {slack.outcome_text(current)}"
    _refused(
        "already_decided",
        text,
        slack_user=context.slack_user,
        approval=current,
        actor=context.user,
    )
    _tell(context, text)
    return Answer(
        200,
        {
            "ok": False,
            "error": text,
            "status": current.status,
            "decided_by": (
                current.decided_by.get_username() if current.decided_by else None
            ),
        },
    )
