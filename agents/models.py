"""Agent Reach data: agent profiles, tools, conversations, runs and their steps."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents.engine import spec as engine


class Agent(models.Model):
    """An agent profile: instructions, model, which tools, and its limits."""

    class OnApprovalExpired(models.TextChoices):
        TELL_MODEL = "tell_model", "Tell the model the action expired"
        STOP = "stop", "Stop the task (approval_expired)"

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    instructions = models.TextField(blank=True)
    model = models.CharField(
        max_length=200, blank=True, help_text="Blank means OPENAI_MODEL."
    )
    tools = models.ManyToManyField("Tool", blank=True, related_name="agents")
    tool_tags = models.JSONField(
        default=list, blank=True, help_text="Also offer every enabled tool with a tag."
    )
    is_default = models.BooleanField(default=False)
    max_steps = models.PositiveIntegerField(default=12)
    max_tool_calls = models.PositiveIntegerField(default=30)
    tool_error_limit = models.PositiveIntegerField(default=8)
    consecutive_failure_limit = models.PositiveIntegerField(default=3)
    time_budget_s = models.PositiveIntegerField(default=600)
    token_budget = models.PositiveIntegerField(default=200_000)
    context_budget_tokens = models.PositiveIntegerField(default=3500)
    parallel_tool_calls = models.PositiveIntegerField(default=4)
    on_approval_expired = models.CharField(
        max_length=20,
        choices=OnApprovalExpired.choices,
        default=OnApprovalExpired.TELL_MODEL,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def effective_model(self) -> str:
        return self.model or settings.OPENAI_MODEL

    def limits(self) -> engine.Limits:
        return engine.Limits(
            max_steps=self.max_steps,
            max_tool_calls=self.max_tool_calls,
            tool_error_limit=self.tool_error_limit,
            consecutive_failure_limit=self.consecutive_failure_limit,
            time_budget_s=float(self.time_budget_s),
            token_budget=self.token_budget,
            context_budget_tokens=self.context_budget_tokens,
            parallel_tool_calls=self.parallel_tool_calls,
            stop_on_approval_expired=(
                self.on_approval_expired == self.OnApprovalExpired.STOP
            ),
        )

    def offered_tools(self) -> list[Tool]:
        """Enabled, confirmed tools chosen by name or by tag, in name order."""
        named = set(self.tools.values_list("pk", flat=True))
        tags = set(self.tool_tags or [])
        return [
            tool
            for tool in Tool.objects.filter(enabled=True, confirmed=True)
            .select_related("mcp_server")
            .order_by("name")
            if tool.pk in named or tags.intersection(tool.tags or [])
        ]


class Tool(models.Model):
    """A tool the model may call: metadata, implementation and policy."""

    class Kind(models.TextChoices):
        PYTHON = "python", "Python (built-in handler)"
        HTTP = "http", "HTTP endpoint"
        MCP = "mcp", "MCP server tool"

    Risk = models.TextChoices("Risk", [(r.name, r.value) for r in engine.Risk])
    Approval = models.TextChoices(
        "Approval", [(a.name, a.value) for a in engine.ApprovalMode]
    )

    name = models.CharField(max_length=64, unique=True)
    description = models.TextField()
    parameters = models.JSONField(default=dict)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.PYTHON)
    handler = models.CharField(
        max_length=100,
        blank=True,
        help_text="For python tools: the name of a handler registered in code.",
    )
    http = models.JSONField(default=dict, blank=True)
    mcp_server = models.ForeignKey(
        "MCPServer", null=True, blank=True, on_delete=models.PROTECT
    )
    mcp_tool = models.CharField(max_length=200, blank=True)
    risk = models.CharField(
        max_length=20, choices=Risk.choices, default=engine.Risk.READ_ONLY
    )
    approval = models.CharField(
        max_length=10, choices=Approval.choices, default=engine.ApprovalMode.NEVER
    )
    approval_rule = models.TextField(blank=True, null=True)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    approval_ttl_s = models.PositiveIntegerField(default=3600)
    untrusted_output = models.BooleanField(default=False)
    idempotent = models.BooleanField(
        default=False, help_text="Honours idempotency keys (safe to retry)."
    )
    timeout_s = models.FloatField(default=10.0)
    max_retries = models.PositiveSmallIntegerField(default=0)
    max_result_chars = models.PositiveIntegerField(default=4000)
    result_fields = models.JSONField(default=list, blank=True)
    cache_ttl_s = models.PositiveIntegerField(default=0)
    rate_limit_per_min = models.PositiveIntegerField(default=0)
    preview_template = models.CharField(max_length=300, blank=True)
    tags = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    confirmed = models.BooleanField(
        default=True,
        help_text="Imported tools start unconfirmed: an operator reviews the policy.",
    )
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def spec(self) -> engine.ToolSpec:
        return engine.ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            kind=self.kind,
            risk=engine.Risk(self.risk),
            approval=engine.ApprovalMode(self.approval),
            approval_rule=self.approval_rule or None,
            approvals_required=self.approvals_required,
            approval_ttl_s=self.approval_ttl_s,
            untrusted_output=self.untrusted_output,
            idempotent=self.idempotent,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            max_result_chars=self.max_result_chars,
            result_fields=tuple(self.result_fields or ()),
            cache_ttl_s=self.cache_ttl_s,
            rate_limit_per_min=self.rate_limit_per_min,
            preview_template=self.preview_template,
            tags=tuple(self.tags or ()),
            version=self.version,
        )


class ToolVersion(models.Model):
    """Every change of a tool's definition, with who and when."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    definition = models.JSONField()
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "version"], name="uniq_tool_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} v{self.version}"


class MCPServer(models.Model):
    """An MCP server whose tools can be imported (stdio command or HTTP URL)."""

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio command"
        HTTP = "http", "Streamable HTTP"

    name = models.SlugField(max_length=64, unique=True)
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.JSONField(default=list, blank=True, help_text="argv list (stdio)")
    url = models.URLField(blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT)
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
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

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
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
    error_message = models.TextField(blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    step_count = models.PositiveIntegerField(default=0)
    rev = models.PositiveBigIntegerField(default=0)
    # The lease: who drives the run, under which epoch, until when.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_epoch = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    active_seconds = models.FloatField(default=0.0)
    cancel_requested = models.BooleanField(default=False)
    tainted_by = models.JSONField(default=list, blank=True)
    # The agent as this run used it: instructions, limits and tool definitions.
    agent_snapshot = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    parent_seq = models.PositiveIntegerField(null=True, blank=True)
    origin = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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
    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

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

    class Meta:
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
        return engine.StepRecord(
            seq=self.seq,
            kind=engine.StepKind(self.kind),
            status=engine.StepStatus(self.status),
            tool=self.tool,
            tool_version=self.tool_version,
            call_id=self.call_id,
            call_index=self.call_index,
            parent_seq=self.parent_seq,
            arguments=self.arguments,
            raw_arguments=self.raw_arguments,
            proposed_arguments=self.proposed_arguments,
            result=self.result,
            error=self.error,
            error_class=self.error_class,
            attempts=list(self.attempts or []),
            model=self.model,
            request_id=self.request_id,
            response=self.response,
            usage=self.usage,
            idempotency_key=self.idempotency_key,
            tainted_by=list(self.tainted_by or []),
            started_at=self.started_at,
            finished_at=self.finished_at,
            detail=dict(self.detail or {}),
            rev=self.rev,
        )

    RECORD_FIELDS = (
        "kind",
        "status",
        "tool",
        "tool_version",
        "call_id",
        "call_index",
        "parent_seq",
        "arguments",
        "raw_arguments",
        "proposed_arguments",
        "result",
        "error",
        "error_class",
        "attempts",
        "model",
        "request_id",
        "response",
        "usage",
        "idempotency_key",
        "tainted_by",
        "detail",
        "started_at",
        "finished_at",
    )

    def apply(self, record: engine.StepRecord) -> None:
        for name in self.RECORD_FIELDS:
            value: Any = getattr(record, name)
            if hasattr(value, "value") and name in ("kind", "status"):
                value = value.value
            setattr(self, name, value)


class Note(models.Model):
    """Team knowledge that ``search_notes`` reads."""

    title = models.CharField(max_length=200)
    content = models.TextField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
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
    sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.subject} → {self.to} ({self.status})"


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

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()


class Secret(models.Model):
    """A secret for HTTP tools, encrypted at rest; write-only in the admin."""

    name = models.CharField(max_length=64, unique=True)
    ciphertext = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name
