"""Where approval requests are announced (Slack, webhooks) and the outbox of it.

A :class:`NotifyTarget` is one destination an operator configures in the admin.
Every announcement is a :class:`Delivery` row written in the transaction that
changed the request, sent after commit by a Celery task and retried by the
beat's sweep with exponential backoff; each try is a :class:`DeliveryAttempt`.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from infra.model_fields import uuid_id


class NotifyEvent(models.TextChoices):
    """What happened to a request, as a webhook's ``event`` names it."""

    APPROVAL_REQUESTED = "approval.requested", "A request waits for a decision"
    APPROVAL_DECIDED = "approval.decided", "A request was approved or rejected"
    APPROVAL_EXPIRED = "approval.expired", "A request expired undecided"
    APPROVAL_CANCELLED = "approval.cancelled", "A request was withdrawn with its run"


class NotifyTarget(models.Model):
    """One destination of approval announcements."""

    class Kind(models.TextChoices):
        SLACK_CHANNEL = "slack_channel", "Slack channel"
        SLACK_DM = "slack_dm", "Slack direct message to each approver"
        WEBHOOK = "webhook", "Outgoing webhook"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    for_all = models.BooleanField(
        default=True,
        help_text="Announce every approval request (not only those of a route).",
    )
    routes = models.ManyToManyField(
        "approvals.ApprovalRoute",
        blank=True,
        related_name="notify_targets",
        help_text="Also announce the requests of these routes (with 'for all' "
        "off: only those).",
    )
    events = models.JSONField(
        default=list,
        blank=True,
        help_text="The events sent (approval.requested, approval.decided, "
        "approval.expired, approval.cancelled); empty: all of them.",
    )
    slack_channel = models.CharField(
        max_length=100,
        blank=True,
        help_text="Slack channel id (C0123ABCD) of a Slack channel target.",
    )
    url = models.CharField(
        "webhook URL",
        max_length=2000,
        blank=True,
        help_text="http(s) URL the webhook POSTs to. Private and loopback "
        "addresses are refused unless 'allowed addresses' lists them.",
    )
    allowed_hosts = models.JSONField(
        "allowed addresses",
        default=list,
        blank=True,
        help_text="Non-public addresses or networks the URL may reach, as for "
        'HTTP tools, e.g. ["10.0.0.5"] or ["10.1.0.0/16"].',
    )
    secret_name = models.CharField(
        max_length=64,
        blank=True,
        help_text="Name of the secret (Secrets, or REACH_SECRET_<NAME>) that signs "
        "the webhook's X-Reach-Signature. Blank: one is generated on save and "
        "shown once.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def is_slack(self) -> bool:
        return self.kind in (self.Kind.SLACK_CHANNEL, self.Kind.SLACK_DM)

    def wants(self, event: NotifyEvent | str) -> bool:
        return not self.events or str(event) in self.events


class Delivery(models.Model):
    """One announcement to send, once (the ``key``), retried until it is."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook"
        SLACK = "slack"

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        DELIVERED = "delivered"
        FAILED = "failed"

    id = uuid_id()
    key = models.CharField(max_length=200, unique=True)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    target = models.ForeignKey(
        NotifyTarget,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="deliveries",
    )
    event = models.CharField(max_length=50)
    approval_id = models.CharField(max_length=64, blank=True, db_index=True)
    # Where and how, copied from the target when queued: what was promised is
    # what is sent, even if the target is edited or deleted meanwhile.
    url = models.CharField(max_length=2000, blank=True)
    allowed_hosts = models.JSONField(default=list, blank=True)
    secret_name = models.CharField(max_length=64, blank=True)
    payload = models.JSONField()
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.event} → {self.target or self.url} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try of a delivery: the delivery log the admin shows."""

    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"


class SlackMessage(models.Model):
    """A message posted about a request, so it can be updated in place."""

    approval_id = models.CharField(max_length=64, db_index=True)
    target = models.ForeignKey(
        NotifyTarget, null=True, blank=True, on_delete=models.SET_NULL
    )
    channel = models.CharField(max_length=100)
    ts = models.CharField(max_length=40)
    # The approver a direct message went to (their Slack id); blank in a channel.
    slack_user = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["approval_id", "channel"], name="uniq_slack_message_per_channel"
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel}/{self.ts}"


class SlackRequestSeen(models.Model):
    """A signed Slack request already accepted: the same one again is a replay."""

    key = models.CharField(max_length=64, unique=True)
    timestamp = models.PositiveBigIntegerField()
    seen_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.key
