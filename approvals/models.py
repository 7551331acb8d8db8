"""Approval requests: a risky call parked until humans decide."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from engine.spec import DECIDED_AS, HumanDecision, Risk
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
    # The route chosen once, at creation (approvals.routing): who may decide it.
    # Null: no route matched, and every approver may (as before routes).
    route = models.ForeignKey(
        "approvals.ApprovalRoute",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="requests",
    )
    route_reason = models.CharField(max_length=500, blank=True)
    # When the route's escalation approvers were added (the beat's escalate).
    escalated_at = models.DateTimeField(null=True, blank=True)
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


class ApprovalRoute(models.Model):
    """Who may decide which requests: a rule an operator edits in the admin.

    A request matches when every criterion the route sets matches (blank: any);
    of the matching routes the most specific wins (``approvals.routing``). The
    named groups and users decide what it routes; nobody else does, not even
    holders of the approver permission (auditors still read it).
    """

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True)
    priority = models.IntegerField(
        default=0,
        help_text="Breaks ties between equally specific routes: higher wins.",
    )
    tool = models.CharField(
        max_length=64, blank=True, help_text="Tool name; blank: any tool."
    )
    tool_version = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Only this version of the tool (needs a tool); blank: any.",
    )
    agent = models.ForeignKey(
        "registry.Agent",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="approval_routes",
        help_text="Only requests of this agent's runs; blank: any agent.",
    )
    risk = models.CharField(
        max_length=20,
        blank=True,
        choices=[(r.value, r.value) for r in Risk],
        help_text="Only tools of this risk tier; blank: any.",
    )
    condition = models.CharField(
        max_length=2000,
        blank=True,
        help_text="A rule on the call's arguments, in the approval-rule language "
        '(amount > 1000, contains(title, "refund")); blank: any arguments.',
    )
    approver_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="approval_routes"
    )
    approver_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="approval_routes"
    )
    approvals_required = models.PositiveSmallIntegerField(
        default=1,
        help_text="Distinct approvals a request of this route needs (the "
        "two-person rule is 2); replaces the tool's own number.",
    )
    escalate_after_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Unanswered this long, the escalation approvers are added "
        "and told; blank: never.",
    )
    escalation_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="escalation_routes"
    )
    escalation_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="escalation_routes"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-priority", "name"]

    def __str__(self) -> str:
        return self.name


class ApproverAway(models.Model):
    """An approver out of office from ``starts_at`` until ``ends_at``: not
    asked, not told, and not deciding meanwhile; their ``delegate``, when set,
    decides and is told in their place."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="away"
    )
    starts_at = models.DateTimeField(default=timezone.now)
    ends_at = models.DateTimeField()
    delegate = optional_user(related_name="delegated_away")
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-starts_at"]
        verbose_name = "approver away"
        verbose_name_plural = "approvers away"
        indexes = [models.Index(fields=["ends_at", "starts_at"])]

    def __str__(self) -> str:
        return f"{self.user} away until {self.ends_at:%Y-%m-%d %H:%M}"
