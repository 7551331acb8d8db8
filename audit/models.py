"""The append-only audit log: ids, kinds, actors, times and a hash chain."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    position = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=50, db_index=True)
    actor = models.CharField(max_length=150, blank=True)
    task_id = models.CharField(max_length=64, blank=True, db_index=True)
    object_type = models.CharField(max_length=50, blank=True)
    object_id = models.CharField(max_length=200, blank=True)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        db_table = "traces_auditevent"
        ordering = ["position"]

    def __str__(self) -> str:
        return f"#{self.position} {self.kind}"


class AuditHead(models.Model):
    """The single row appends lock, so the hash chain never forks."""

    position = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)

    class Meta:
        db_table = "traces_audithead"

    def __str__(self) -> str:
        return f"head at #{self.position}"
