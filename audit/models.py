"""The append-only audit log: ids, kinds, actors, times and a hash chain."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditKind(models.TextChoices):
    """What an audit event records: ``<noun>.<what happened>``."""

    AUTH_LOGIN_FAILED = "auth.login_failed"
    # Sign-in (accounts/): a lockout begun, counters cleared by an admin, every
    # session of a user ended, a second factor turned on or off, recovery codes
    # issued or one used.
    AUTH_LOCKED_OUT = "auth.locked_out"
    AUTH_UNLOCKED = "auth.unlocked"
    AUTH_SESSIONS_ENDED = "auth.sessions_ended"
    AUTH_2FA_ENABLED = "auth.2fa_enabled"
    AUTH_2FA_DISABLED = "auth.2fa_disabled"
    AUTH_RECOVERY_CODES_ISSUED = "auth.recovery_codes_issued"
    AUTH_RECOVERY_CODE_USED = "auth.recovery_code_used"
    AGENT_CREATED = "agent.created"
    AGENT_CHANGED = "agent.changed"
    # The agents an agent may hand its conversations to (registry.Handoff).
    AGENT_HANDOFFS_CHANGED = "agent.handoffs_changed"
    # Agent versions (registry.versions): a label (production, candidate)
    # moved to a version, and a rollback that made a new version of an old one.
    AGENT_LABEL_MOVED = "agent.label_moved"
    AGENT_ROLLED_BACK = "agent.rolled_back"
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
    # A run handed to another agent (engine.handoff), or a handoff refused
    # (the run's user may not use that agent, or it does not exist).
    TASK_HANDED_OFF = "task.handed_off"
    TASK_HANDOFF_REFUSED = "task.handoff_refused"
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
    # Routing (approvals.routing): a route's escalation added its approvers; a
    # route edited; an approver marked away (with a delegate) or back.
    APPROVAL_ESCALATED = "approval.escalated"
    APPROVAL_ROUTE_CHANGED = "approval.route_changed"
    APPROVER_AWAY_SET = "approver.away_set"
    APPROVER_AWAY_ENDED = "approver.away_ended"
    TRACE_EXPORTED = "trace.exported"
    TRACE_IMPORTED = "trace.imported"
    TRACES_PURGED = "traces.purged"
    # The stored secrets' key (registry.secrets.secrets_rotate) and backups
    # (backups/): security state changed or copied.
    SECRETS_ROTATION_STARTED = "secrets.rotation_started"
    SECRETS_ROTATED = "secrets.rotated"
    SECRETS_ROTATION_INCOMPLETE = "secrets.rotation_incomplete"
    BACKUP_CREATED = "backup.created"
    BACKUP_RESTORED = "backup.restored"
    # Notify (Slack, webhooks): where requests are announced, a signing secret
    # made, a delivery given up or sent again, a Slack interaction accepted or
    # refused (forged, stale, replayed, unknown user, not an approver).
    NOTIFY_TARGET_CHANGED = "notify.target_changed"
    NOTIFY_SECRET_GENERATED = "notify.secret_generated"
    NOTIFY_DELIVERY_FAILED = "notify.delivery_failed"
    NOTIFY_DELIVERY_RETRIED = "notify.delivery_retried"
    SLACK_INTERACTION = "slack.interaction"
    SLACK_INTERACTION_REFUSED = "slack.interaction_refused"
    # Single sign-on (sso/): a sign-in through the provider, one refused (with
    # its reason), a user made by the first sign-in, the groups it mapped, and a
    # provider account's binding to its user deleted by an admin.
    SSO_LOGIN = "sso.login"
    SSO_LOGIN_REFUSED = "sso.login_refused"
    SSO_USER_CREATED = "sso.user_created"
    SSO_IDENTITY_UNBOUND = "sso.identity_unbound"
    USER_GROUPS_CHANGED = "user.groups_changed"
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
