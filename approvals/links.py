"""The decision links of the approval mail: approve or reject one request, as one
approver, once, while the request stands as it was mailed.

A token is ``django.core.signing.dumps`` of what it is bound to (the request's
id, the approver's user id, the request's ``arguments_hash``, the decision, an
expiry no later than the request's ``expires_at``), signed with ``SECRET_KEY``
under :data:`SALT`. Django's signer fits here and ``infra.signing`` does not:
that one signs a raw body with a secret shared with another party (webhooks,
triggers), while a link is a value this instance signs for itself and reads
back, with a salt that keeps it from passing for any other signed value of the
site, and ``SECRET_KEY_FALLBACKS`` to rotate the key.

Opening a link never decides (mail scanners follow links): the confirmation
page (``approvals.views.confirm``) shows the request and posts the decision to
:func:`approvals.services.approval_decide_by_link`, which decides through
``approval_decide`` like the queue (exactly once, the second factor, the audit)
and records the link's use (:class:`~approvals.models.ApprovalLinkUse`) in the
same transaction, so a replay is refused. A request no longer pending, past its
expiry or edited since the mail refuses every link made for it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalDecision, ApprovalLinkUse, ApprovalRequest
from approvals.selectors import approval_shown, may_decide
from infra.errors import ErrorKind, ServiceError

#: Namespaces the signature: no other value this site signs passes for a link.
SALT = "approvals.links.v1"
#: The decisions a mailed link may carry (recovery requests: approve is retry).
LINK_DECISIONS = (ApprovalDecision.APPROVE, ApprovalDecision.REJECT)


class Reason:
    """Why a link is refused, as the refusal page and the tests name it."""

    FORGED = "forged"
    OTHER_USER = "other_user"
    NOT_ALLOWED = "not_allowed"
    UNKNOWN = "unknown"
    DECIDED = "decided"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    STALE = "stale"
    USED = "used"


class LinkRefused(ServiceError):
    """A link that may not decide; ``reason`` says why (:class:`Reason`), and
    ``approval`` is the request when the refusal is about its state."""

    default_kind = ErrorKind.CONFLICT

    def __init__(
        self,
        reason: str,
        message: str,
        kind: ErrorKind | None = None,
        approval: ApprovalRequest | None = None,
    ) -> None:
        super().__init__(message, kind)
        self.reason = reason
        self.approval = approval


@dataclass(frozen=True)
class Link:
    """What a token is bound to."""

    approval_id: str
    user_id: int
    arguments_hash: str
    decision: ApprovalDecision
    #: Unix seconds; never after the request's ``expires_at``.
    expires: int


def make_token(approval: ApprovalRequest, user: Any, decision: str) -> str:
    """The signed token of ``user``'s ``decision`` link for ``approval``."""
    payload = {
        "a": str(approval.pk),
        "u": user.pk,
        "h": approval.arguments_hash,
        "d": ApprovalDecision(decision).value,
        # Rounded down: the link dies no later than the request.
        "e": int(approval.expires_at.timestamp()),
    }
    return signing.dumps(payload, salt=SALT)


def link_url(approval: ApprovalRequest, user: Any, decision: str) -> str:
    """The absolute URL of the link (``REACH_PUBLIC_URL``) as the mail shows it."""
    path = reverse("approval-confirm", args=[approval.pk])
    query = urlencode({"t": make_token(approval, user, decision)})
    return f"{settings.REACH_PUBLIC_URL.rstrip('/')}{path}?{query}"


def read_token(token: str) -> Link:
    """The link ``token`` carries; :class:`LinkRefused` when it was not signed
    here under :data:`SALT` or does not hold a link."""
    forged = LinkRefused(
        Reason.FORGED,
        "This link is not valid: it was not made by Agent Reach, or it was cut "
        "or changed on the way. Open the approval queue instead.",
        ErrorKind.INVALID,
    )
    try:
        payload = signing.loads(token, salt=SALT)
        link = Link(
            approval_id=str(payload["a"]),
            user_id=int(payload["u"]),
            arguments_hash=str(payload["h"]),
            decision=ApprovalDecision(payload["d"]),
            expires=int(payload["e"]),
        )
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise forged from None
    if link.decision not in LINK_DECISIONS:
        raise forged
    return link


def token_digest(token: str) -> str:
    """What :class:`ApprovalLinkUse` stores of a used token."""
    return hashlib.sha256(token.encode()).hexdigest()


def link_open(token: str, approval_id: Any, user: Any) -> tuple[Link, ApprovalRequest]:
    """The link and its request, as the confirmation page shows them, when
    ``user`` may decide by it now; else :class:`LinkRefused` saying why."""
    link = read_token(token)
    if link.approval_id != str(approval_id):
        raise LinkRefused(
            Reason.FORGED,
            "This link belongs to another request. Open the approval queue instead.",
            ErrorKind.INVALID,
        )
    if link.user_id != user.pk:
        raise LinkRefused(
            Reason.OTHER_USER,
            f"This link was mailed to another approver; you are signed in as "
            f"{user.get_username()}. Nothing was decided. Sign in as the approver it "
            f"was sent to, or decide in the approval queue.",
            ErrorKind.FORBIDDEN,
        )
    approval = approval_shown(link.approval_id)
    if approval is None:
        raise LinkRefused(
            Reason.UNKNOWN, "This request no longer exists.", ErrorKind.NOT_FOUND
        )
    if not may_decide(user, approval):
        raise LinkRefused(
            Reason.NOT_ALLOWED,
            "You may not decide this request (you are not one of its approvers).",
            ErrorKind.FORBIDDEN,
            approval,
        )
    _check_state(link, approval, token)
    return link, approval


def _check_state(link: Link, approval: ApprovalRequest, token: str) -> None:
    """Refuse a link its request has outlived: decided, expired, cancelled,
    edited since the mail, or the link already used."""
    now = timezone.now()
    status = approval.status
    if status in (ApprovalRequest.Status.APPROVED, ApprovalRequest.Status.REJECTED):
        raise LinkRefused(
            Reason.DECIDED, "This request is already decided.", approval=approval
        )
    if status == ApprovalRequest.Status.CANCELLED:
        raise LinkRefused(
            Reason.CANCELLED,
            "This request was withdrawn: its run was cancelled.",
            approval=approval,
        )
    if status == ApprovalRequest.Status.EXPIRED or approval.expires_at <= now:
        raise LinkRefused(
            Reason.EXPIRED,
            "This request has expired: nobody decided in time.",
            approval=approval,
        )
    if link.expires <= now.timestamp():
        raise LinkRefused(Reason.EXPIRED, "This link has expired.", approval=approval)
    if link.arguments_hash != approval.arguments_hash:
        raise LinkRefused(
            Reason.STALE,
            "The request was edited after this mail was sent: decide what it holds "
            "now in the approval queue.",
            approval=approval,
        )
    if ApprovalLinkUse.objects.filter(token_digest=token_digest(token)).exists():
        raise used(approval)


def used(approval: ApprovalRequest) -> LinkRefused:
    """The refusal of a link already used."""
    return LinkRefused(
        Reason.USED,
        "This link was already used: each link decides once.",
        approval=approval,
    )
