"""Approval requests: a risky call parked until humans decide."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from engine.spec import DECIDED_AS, HumanDecision
from infra.model_fields import optional_user, uuid_id


class ApprovalDecision(models.TextChoices):
    """What an approver may decide; the label is how steps and the history show it."""

    APPROVE = HumanDecision.APPROVE.value, DECIDED_AS[HumanDecision.APPROVE]
    REJECT = HumanDecision.REJECT.value, DECIDED_AS[HumanDecision.REJECT]
    # Recovery requests only: the operator checked that the call happened.
    MARK_DONE = HumanDecision.MARK_DONE.value, DECIDED_AS[HumanDecision.MARK_DONE]
    # Recovery requests only: run the call again (``approve`` on a recovery
    # request means the same and is recorded as this).
    RETRY = HumanDecision.RETRY.value, DECIDED_AS[HumanDecision.RETRY]


class ApprovalRequest(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        CANCELLED = "cancelled"

    class Kind(models.TextChoices):
        ACTION = "action", "Approve an action"
        RECOVERY = "recovery", "Did it happen? (outcome unknown after a crash)"

    id = uuid_id()
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.ACTION)
    task = models.ForeignKey(
        "runs.Task", on_delete=models.CASCADE, related_name="approvals"
    )
    # A step may be asked about more than once: approved first, then (after a
    # crash in the middle of it) a recovery request "did it happen?".
    step = models.ForeignKey(
        "runs.Step", on_delete=models.CASCADE, related_name="approvals"
    )
    tool = models.CharField(max_length=64, db_index=True)
    risk = models.CharField(max_length=20)
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    proposed_arguments = models.JSONField(null=True, blank=True)
    preview = models.CharField(max_length=500)
    reasons = models.JSONField(default=list)
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True
    )
    tainted_by = models.JSONField(default=list, blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    requested_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)
    decided_by = optional_user(related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    # What the deciding approver chose. ``status`` says whether the call may run
    # (mark done and retry are both ``approved``); this says what was decided.
    # Empty while pending and for requests nobody decided (expired, cancelled).
    decision = models.CharField(
        max_length=10, choices=ApprovalDecision.choices, blank=True
    )
    diff = models.JSONField(null=True, blank=True)
    # Bumped by every vote; a decision is a compare-and-swap on it.
    version = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["requested_at"]
        permissions = [("decide_approval", "Can approve or reject agent actions")]
        constraints = [
            models.UniqueConstraint(
                fields=["step"],
                condition=models.Q(status="pending"),
                name="uniq_pending_approval_per_step",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool}: {self.preview}"

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING


class ApprovalVote(models.Model):
    """One approver's approve vote (two-person rule needs two distinct users)."""

    approval = models.ForeignKey(
        ApprovalRequest, on_delete=models.CASCADE, related_name="votes"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    arguments_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "user"], name="uniq_vote_per_user"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} approved {self.approval_id}"


class ApprovalLinkUse(models.Model):
    """A mailed decision link that has been used (``approvals.links``): a link
    decides once, so a replayed one (a forwarded mail, a second click) is refused.

    Stores the token's SHA-256, never the token itself: a row read from a backup
    cannot be replayed either.
    """

    token_digest = models.CharField(max_length=64, unique=True)
    approval = models.ForeignKey(
        ApprovalRequest, on_delete=models.CASCADE, related_name="link_uses"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    decision = models.CharField(max_length=10, choices=ApprovalDecision.choices)
    used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["used_at"]

    def __str__(self) -> str:
        return f"{self.user} used a {self.decision} link of {self.approval_id}"
