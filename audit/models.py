"""The append-only audit log: ids, kinds, actors, times and a hash chain."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditKind(models.TextChoices):
    """What an audit event records: ``<noun>.<what happened>``."""

    AUTH_LOGIN_FAILED = "auth.login_failed"
    AGENT_CREATED = "agent.created"
    AGENT_CHANGED = "agent.changed"
    TOOL_REGISTERED = "tool.registered"
    TOOL_CHANGED = "tool.changed"
    TOOL_ENABLED = "tool.enabled"
    TOOL_DISABLED = "tool.disabled"
    TOOL_CONFIRMED = "tool.confirmed"
    TOOL_TRIED = "tool.tried"
    TASK_STARTED = "task.started"
    TASK_CANCEL_REQUESTED = "task.cancel_requested"
    TASK_FINISHED = "task.finished"
    TASK_FORKED = "task.forked"
    TASK_REQUEUED = "task.requeued"
    TASK_RETRIED = "task.retried"
    ACCESS_CHANGED = "access.changed"
    PRICE_CHANGED = "price.changed"
    BUDGET_CHANGED = "budget.changed"
    # Budgets (runs.budgets, engine limits): a run stopped by its cost budget,
    # a message refused by its user's daily budget, a call over its tool's
    # max_calls_per_run refused.
    BUDGET_RUN_EXCEEDED = "budget.run_exceeded"
    BUDGET_DAILY_REFUSED = "budget.daily_refused"
    TOOL_CALL_LIMITED = "tool.call_limited"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_VOTED = "approval.voted"
    APPROVAL_DECIDED = "approval.decided"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_CANCELLED = "approval.cancelled"
    TRACE_EXPORTED = "trace.exported"
    TRACE_IMPORTED = "trace.imported"
    TRACES_PURGED = "traces.purged"
    # Automations: schedules saved, paused (by a person or because the owner may
    # no longer run them), resumed, run now, fired; triggers created, fired and
    # refused (unsigned, forged, stale, replayed, over their rate).
    SCHEDULE_SAVED = "schedule.saved"
    SCHEDULE_PAUSED = "schedule.paused"
    SCHEDULE_RESUMED = "schedule.resumed"
    SCHEDULE_RUN_NOW = "schedule.run_now"
    SCHEDULE_FIRED = "schedule.fired"
    TRIGGER_CREATED = "trigger.created"
    TRIGGER_CHANGED = "trigger.changed"
    TRIGGER_FIRED = "trigger.fired"
    TRIGGER_REFUSED = "trigger.refused"


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
