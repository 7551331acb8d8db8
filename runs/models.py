"""Runs: conversations, their messages, tasks (one run of the loop) and steps.

The tables keep the names they had in the ``agents`` app (``db_table``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from engine import spec as engine
from infra.model_fields import uuid_id
from infra.records import record_of
from registry.models import Agent


def default_on_busy() -> str:
    """What a new conversation does with a message sent while a run goes on
    (``REACH_ON_BUSY``, default ``queue``)."""
    return str(settings.REACH_ON_BUSY)


class Conversation(models.Model):
    class OnBusy(models.TextChoices):
        """What a message sent while a run of the conversation goes on does."""

        #: Stored, and started when the run ends.
        QUEUE = "queue"
        #: The run is cancelled at its next step boundary; a new one starts with
        #: both messages.
        INTERRUPT = "interrupt"
        #: Refused (409), as before queueing existed.
        REFUSE = "refuse"

    id = uuid_id()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT)
    title = models.CharField(max_length=200, blank=True)
    # An evaluation's conversation: kept out of the chat lists.
    is_eval = models.BooleanField(default=False)
    on_busy = models.CharField(
        max_length=10,
        choices=OnBusy.choices,
        default=default_on_busy,
        help_text="What a message sent while a run goes on does.",
    )
    webhook_url = models.CharField(
        max_length=2000,
        blank=True,
        help_text="Where each run's outcome is posted when it ends or waits for "
        "an approval (notify's completion webhooks); blank: nowhere.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_conversation"
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField()
    task = models.ForeignKey(
        "Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_message"
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class Task(models.Model):
    """One run of the agent loop toward one user goal."""

    Status = models.TextChoices(
        "Status", [(s.name, s.value) for s in engine.TaskStatus]
    )
    StopReason = models.TextChoices(
        "StopReason", [(s.name, s.value) for s in engine.StopReason]
    )
    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.WAITING_APPROVAL)

    id = uuid_id()
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="tasks"
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="tasks")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tasks"
    )
    model = models.CharField(max_length=200)
    goal = models.TextField()
    status = models.CharField(
        max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    stop_reason = models.CharField(
        max_length=30, choices=StopReason.choices, null=True, blank=True
    )
    final_answer = models.TextField(null=True, blank=True)
    # A structured answer's parsed value (the agent's answer_schema); null otherwise.
    answer_json = models.JSONField(null=True, blank=True)
    error_message = models.TextField(blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    # Model calls whose tokens were estimated (the endpoint reported none).
    estimated_calls = models.PositiveIntegerField(default=0)
    # USD of the run's own model calls at its price; null when its model has
    # no price (cost unknown, never 0). Summed by the same bump as the tokens.
    cost_usd = models.FloatField(null=True, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    rev = models.PositiveBigIntegerField(default=0)
    # The lease: who drives the run, under which epoch, until when.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_epoch = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    active_seconds = models.FloatField(default=0.0)
    cancel_requested = models.BooleanField(default=False)
    # A message waits for this run to end (QueuedMessage): whoever finishes the
    # run starts it after commit. A flag on the row the finish reads anyway, so a
    # run nobody queued behind costs no query.
    followup_queued = models.BooleanField(default=False)
    # Where the run's outcome is posted (its conversation's webhook_url, copied
    # when it starts): on the row the finish and the park read anyway, so a run
    # without one costs no query.
    webhook_url = models.CharField(max_length=2000, blank=True)
    # What started the run when no one typed it: "schedule:<id>",
    # "trigger:<id>" (automations); blank for a chat message.
    source = models.CharField(max_length=120, blank=True, db_index=True)
    tainted_by = models.JSONField(default=list, blank=True)
    # The taint it started with (earlier tasks of its conversation, the parent),
    # recorded when it starts; null on tasks from before it was recorded.
    inherited_taint = models.JSONField(null=True, blank=True)
    # The agent as this run used it: instructions, limits and tool definitions.
    agent_snapshot = models.JSONField(default=dict, blank=True)
    # The number of the agent's version it ran (registry.AgentVersion); null on
    # runs from before versions, imported ones, and an agent without any.
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    parent_seq = models.PositiveIntegerField(null=True, blank=True)
    origin = models.JSONField(null=True, blank=True)
    # The route of the turn (engine.routing): its toolsets' tags joined by "+",
    # "none" or "general"; null when the agent has no toolsets (or until the
    # run's routing call chose).
    intent = models.CharField(max_length=200, null=True, blank=True, db_index=True)
    # An evaluation run: its report, case and run number, and what its tools
    # answer (engine.evaluation.EvalCase). Null for every other task.
    eval_case = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agents_task"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "-created_at"]),
            models.Index(fields=["status", "lease_expires_at"]),
        ]
        permissions = [("audit_task", "Can read every task, trace and approval")]

    def __str__(self) -> str:
        return f"{self.goal[:40]} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in engine.FINAL_TASK_STATUSES

    @property
    def is_imported(self) -> bool:
        return self.origin is not None

    @property
    def is_eval(self) -> bool:
        return self.eval_case is not None

    @property
    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @property
    def usage_estimated(self) -> bool:
        """Some of its tokens are estimates (the endpoint reported no usage)."""
        return bool(self.estimated_calls)

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class Step(models.Model):
    """One model call, tool call, note or compaction of a task."""

    Kind = models.TextChoices("Kind", [(k.name, k.value) for k in engine.StepKind])
    Status = models.TextChoices(
        "Status", [(s.name, s.value) for s in engine.StepStatus]
    )

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="steps")
    seq = models.PositiveIntegerField()
    rev = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=20, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices)
    tool = models.CharField(max_length=64, null=True, blank=True, db_index=True)
    tool_version = models.PositiveIntegerField(null=True, blank=True)
    call_id = models.CharField(max_length=200, null=True, blank=True)
    call_index = models.PositiveIntegerField(null=True, blank=True)
    parent_seq = models.PositiveIntegerField(null=True, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    raw_arguments = models.TextField(null=True, blank=True)
    proposed_arguments = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    error_class = models.CharField(max_length=50, null=True, blank=True)
    attempts = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=200, null=True, blank=True)
    request_id = models.CharField(max_length=200, null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    usage = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    tainted_by = models.JSONField(default=list, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A model call's cost (USD) at the run's price; null: unknown or no model call.
    cost_usd = models.FloatField(null=True, blank=True)
    # The acting agent's name, on runs whose agent may hand off (engine.handoff);
    # null on the others (the task's agent acted).
    agent = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        db_table = "agents_step"
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["task", "seq"], name="uniq_step_seq"),
        ]
        indexes = [models.Index(fields=["task", "rev"])]

    def __str__(self) -> str:
        return f"#{self.seq} {self.tool or self.kind} ({self.status})"

    @property
    def duration_ms(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return round((self.finished_at - self.started_at).total_seconds() * 1000, 1)

    def record(self) -> engine.StepRecord:
        # The engine's types: enums, and lists and dicts that are never None.
        return record_of(
            self,
            engine.StepRecord,
            kind=engine.StepKind(self.kind),
            status=engine.StepStatus(self.status),
            attempts=list(self.attempts or []),
            tainted_by=list(self.tainted_by or []),
            detail=dict(self.detail or {}),
        )

    #: The fields a step persists of the engine's record: every field of
    #: ``StepRecord`` but its identity (``seq``) and the journal's ``rev``.
    RECORD_FIELDS = tuple(
        f.name
        for f in dataclasses.fields(engine.StepRecord)
        if f.name not in ("seq", "rev")
    )

    def apply(self, record: engine.StepRecord) -> None:
        for name in self.RECORD_FIELDS:
            value: Any = getattr(record, name)
            if hasattr(value, "value") and name in ("kind", "status"):
                value = value.value
            setattr(self, name, value)


class QueuedMessage(models.Model):
    """A message sent while a run of its conversation went on, waiting to start.

    Started exactly once (a guarded UPDATE of ``state`` in the transaction that
    creates its run) by whoever finishes the run it waits for, or by the reaper
    when that process died before it could.
    """

    class Mode(models.TextChoices):
        QUEUE = "queue"
        INTERRUPT = "interrupt"

    class State(models.TextChoices):
        QUEUED = "queued"
        STARTED = "started"
        #: It could not start (the daily budget, the agent no longer usable…):
        #: ``error`` says why.
        FAILED = "failed"

    id = uuid_id()
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="queued_messages"
    )
    content = models.TextField()
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.QUEUE)
    state = models.CharField(
        max_length=10, choices=State.choices, default=State.QUEUED, db_index=True
    )
    #: The run it waited for, and the run it started.
    behind = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["state", "created_at"])]

    def __str__(self) -> str:
        return f"{self.content[:40]} ({self.state})"


class DailyBudget(models.Model):
    """What a user may spend per day (USD, tokens or both); the row without a
    user is everyone's who has no row of their own.

    A day runs from midnight to midnight in ``TIME_ZONE``; a new message is
    refused (429, saying when the budget resets) once the day's runs of the
    user cost or used this much, counting what their runs still going hold
    (:class:`BudgetHold`). Runs already going finish.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="daily_budget",
        help_text="Blank: the default budget of every user without their own.",
    )
    max_cost_usd = models.FloatField(
        "max cost per day (USD)",
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Blank: no limit in USD. Runs of unpriced models add nothing.",
    )
    max_tokens = models.PositiveBigIntegerField(
        "max tokens per day",
        null=True,
        blank=True,
        help_text="Blank: no limit in tokens (estimated tokens count too).",
    )
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["user__username"]

    def __str__(self) -> str:
        who = self.user.get_username() if self.user else "everyone (default)"
        return f"daily budget of {who}"

    def clean(self) -> None:
        if self.user_id is None:
            others = DailyBudget.objects.filter(user__isnull=True).exclude(pk=self.pk)
            if others.exists():
                raise ValidationError(
                    {"user": "There is a default budget already; edit that one."}
                )


class BudgetHold(models.Model):
    """What an accepted run of a user with a daily budget holds of that budget
    while it goes on: its own limits (tokens, and USD at its price), at most
    what was left. A held amount is counted as spent until the run ends, so a
    message sent while it runs sees it; the run's own spending replaces it as
    it goes. Written only for users with a budget (:mod:`runs.budgets`).
    """

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="budget_hold"
    )
    tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"budget hold of task {self.task_id}"


class ApiToken(models.Model):
    """A bearer token for the API; only its hash is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agents_apitoken"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()
