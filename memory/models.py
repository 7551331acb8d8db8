"""Long-term memory: facts kept across conversations, with their source and history.

An item belongs to one user (what runs and the user wrote about that user) or to
one agent (what admins tell the agent for everyone). Writing on a subject that
already holds a live item supersedes it: the older item stays, marked
superseded, and points at nothing; the newer one names it in ``supersedes``.
Each item records who wrote it (a run's task and step, or a person) and whether
that run was tainted (``tainted_by``): a tainted item taints every run it is
given to.
"""

from __future__ import annotations

import secrets
from enum import StrEnum

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from infra.model_fields import optional_user, uuid_id
from registry.models import Agent
from runs.models import Task


class MemoryAuditKind(StrEnum):
    """What the audit log records of memory (``audit_append`` kinds)."""

    WRITTEN = "memory.written"
    CHANGED = "memory.changed"
    FORGOTTEN = "memory.forgotten"
    DELETED = "memory.deleted"
    PURGED = "memories.purged"


def _search_rowid() -> int:
    # The full-text row of the item (SQLite's FTS5 rowid): random, never reused.
    return secrets.randbits(62) + 1


class MemoryItem(models.Model):
    class Scope(models.TextChoices):
        USER = "user", "A user"
        AGENT = "agent", "An agent (everyone who uses it)"

    class Status(models.TextChoices):
        LIVE = "live"
        SUPERSEDED = "superseded"
        FORGOTTEN = "forgotten"

    class SourceKind(models.TextChoices):
        RUN = "run", "A run (the task and step that wrote it)"
        PERSON = "person", "A person"

    id = uuid_id()
    scope = models.CharField(max_length=10, choices=Scope.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memories",
    )
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memories",
    )
    subject = models.CharField(max_length=200, blank=True)
    #: ``subject`` folded (case, spaces): what a later write on "the same
    #: subject" is matched by.
    subject_key = models.CharField(max_length=200, blank=True, db_index=True)
    text = models.TextField()
    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.LIVE, db_index=True
    )
    supersedes = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="superseded_by",
    )
    source_kind = models.CharField(max_length=10, choices=SourceKind.choices)
    source_task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_seq = models.PositiveIntegerField(null=True, blank=True)
    source_user = optional_user(related_name="+")
    #: The source in words, kept when the task is purged or the person deleted.
    source_label = models.CharField(max_length=200, blank=True)
    #: Who forgot it (a run's step or a person), in words.
    forgotten_by = models.CharField(max_length=200, blank=True)
    #: Taint sources of the run that wrote it; empty when trusted.
    tainted_by = models.JSONField(default=list, blank=True)
    #: The writing call's key (docs/api.md "Step"): a second execution finds this row.
    idempotency_key = models.CharField(
        max_length=200, null=True, blank=True, unique=True
    )
    #: The text as full-text terms (``effects.search.tokens``): CJK runs and
    #: their bigrams, Latin words. The database's index is built from these.
    subject_terms = models.TextField(blank=True)
    text_terms = models.TextField(blank=True)
    search_rowid = models.BigIntegerField(
        unique=True, default=_search_rowid, editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-updated_at", "-created_at"]
        indexes = [
            models.Index(fields=["user", "status", "-updated_at"]),
            models.Index(fields=["agent", "status", "-updated_at"]),
        ]
        constraints = [
            # One live item per subject and owner; the service supersedes first,
            # this is the backstop against two writes at once.
            models.UniqueConstraint(
                fields=["user", "subject_key"],
                condition=Q(scope="user", status="live") & ~Q(subject_key=""),
                name="memory_one_live_per_user_subject",
            ),
            models.UniqueConstraint(
                fields=["agent", "subject_key"],
                condition=Q(scope="agent", status="live") & ~Q(subject_key=""),
                name="memory_one_live_per_agent_subject",
            ),
            models.CheckConstraint(
                condition=(Q(scope="user") & Q(user__isnull=False))
                | (Q(scope="agent") & Q(agent__isnull=False)),
                name="memory_scope_has_owner",
            ),
        ]
        permissions = [
            ("manage_agent_memory", "Can write and edit what an agent remembers")
        ]

    def __str__(self) -> str:
        return f"{self.subject or self.text[:40]} ({self.state})"

    @property
    def tainted(self) -> bool:
        return bool(self.tainted_by)

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def state(self) -> str:
        """``live``, ``expired``, ``superseded`` or ``forgotten``."""
        if self.status == self.Status.LIVE and self.expired:
            return "expired"
        return str(self.status)

    @property
    def recallable(self) -> bool:
        return self.status == self.Status.LIVE and not self.expired

    @property
    def short_id(self) -> str:
        return self.id.hex[:8]

    @property
    def taint_label(self) -> str:
        """What names this item as a taint source of a run it is given to."""
        return f"memory:{self.short_id}"
