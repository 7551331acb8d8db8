"""Effects: the write ledger, the mail outbox, and the demo domain (notes, tickets).

The tables keep the names they had in the ``agents`` app (``db_table``).
"""

from __future__ import annotations

from enum import StrEnum

from django.db import models
from django.utils import timezone

from infra.model_fields import optional_user
from runs.models import Task


class Note(models.Model):
    """Team knowledge that ``search_notes`` reads."""

    title = models.CharField(max_length=200)
    content = models.TextField()
    author = optional_user()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_note"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.title


class Ticket(models.Model):
    """A ticket created by the agent's ``create_ticket`` tool."""

    title = models.CharField(max_length=200)
    body = models.TextField()
    idempotency_key = models.CharField(max_length=200, unique=True)
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_ticket"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class ToolExecution(models.Model):
    """The effect ledger: one row per write, keyed by its idempotency key."""

    class Status(models.TextChoices):
        DONE = "done"
        UNKNOWN = "unknown"

    idempotency_key = models.CharField(max_length=200, unique=True)
    tool = models.CharField(max_length=64)
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL)
    arguments_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=Status.choices)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_toolexecution"

    def __str__(self) -> str:
        return f"{self.tool} {self.idempotency_key} ({self.status})"


class Outbox(models.Model):
    """Mail waiting to be sent; written in the ledger's transaction."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        SENT = "sent"
        FAILED = "failed"

    idempotency_key = models.CharField(max_length=200, unique=True)
    message_id = models.CharField(max_length=300, unique=True)
    to = models.CharField(max_length=320)
    subject = models.CharField(max_length=500)
    body = models.TextField()
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # When a dispatcher last claimed the row (set with ``sending``): a send in
    # flight is judged by how long ago it was claimed, not by how long the mail
    # waited before that.
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agents_outbox"

    def __str__(self) -> str:
        return f"{self.subject} → {self.to} ({self.status})"


class MailReport(StrEnum):
    """What the mail tool's result says of its mail (its ``status``), beside the
    row's own :class:`Outbox.Status` when the dispatcher did not get to it."""

    #: In the outbox, not sent yet: just written, or a send that failed and is
    #: retried (the row is pending).
    QUEUED = "queued"
    SENT = "sent"
