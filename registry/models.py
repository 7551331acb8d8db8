"""The registry: agent profiles, tools and their versions, MCP servers, secrets.

The tables keep the names they had in the ``agents`` app (``db_table``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from engine import spec as engine
from engine.handoff import MAX_TARGET_NAME
from engine.pricing import ModelPrice as EnginePrice
from engine.routing import Routing, check_toolsets
from engine.structured import schema_problem
from infra.model_fields import optional_user
from infra.records import record_of

_USERS_HELP = (
    "Who may use it: these users and the members of the groups below. Leave both "
    "empty for everyone."
)
_GROUPS_HELP = "Members of these groups may use it (with the users above)."
_TOOLSETS_HELP = (
    "Routing by intent (optional): toolsets by tool tag, e.g. "
    '[{"tag": "notes", "description": "Search the team\'s notes", '
    '"keywords": ["note", "笔记", "search"]}]. Each turn offers the tools of the '
    "toolsets whose keywords occur in the message, plus every tool in no toolset. "
    "Empty: every tool, every turn."
)


def validate_toolsets(value: Any) -> None:
    try:
        check_toolsets(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def _usable_by(
    related_name: str,
) -> tuple[models.ManyToManyField[Any, Any], models.ManyToManyField[Any, Any]]:
    """Who may use an agent or a tool (registry.access): the users and the groups
    whose members may; both empty means everyone."""
    return (
        models.ManyToManyField(
            settings.AUTH_USER_MODEL,
            blank=True,
            related_name=related_name,
            help_text=_USERS_HELP,
        ),
        models.ManyToManyField(
            "auth.Group", blank=True, related_name=related_name, help_text=_GROUPS_HELP
        ),
    )


class _Registered(models.Model):
    """What an agent and a tool share: listed and shown by name, with when it was
    registered and last changed."""

    #: Each declares its own (a slug for an agent).
    name: str
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Agent(_Registered):
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
    max_cost_usd = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        verbose_name="max cost per run (USD)",
        help_text="What one run may spend on model calls; it stops with "
        "cost_budget once its calls cost this much. Blank: no limit. Applies only "
        "to a model with a price (Admin → Model prices).",
    )
    toolsets = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_toolsets],
        help_text=_TOOLSETS_HELP,
    )
    route_by_model = models.BooleanField(
        default=True,
        help_text="When no toolset's keywords match a message, ask the model which "
        "toolsets it needs (one short call, recorded as the run's first model "
        "step). Off: such a message is offered every tool.",
    )
    questions_read_only = models.BooleanField(
        default=True,
        verbose_name="questions get no write",
        help_text="Where the product runs as an assistant (REACH_QUESTIONS_READ_ONLY, "
        "on with the built-in model), a message that asks a question and asks for "
        "no action is offered only the read-only tools; its trace names the tools "
        "it went without. Off: every message is offered every tool.",
    )
    on_approval_expired = models.CharField(
        max_length=20,
        choices=OnApprovalExpired.choices,
        default=OnApprovalExpired.TELL_MODEL,
    )
    handoff_targets = models.ManyToManyField(
        "self",
        through="Handoff",
        through_fields=("source", "target"),
        symmetrical=False,
        blank=True,
        related_name="handoff_sources",
    )
    max_handoffs = models.PositiveIntegerField(
        default=5,
        help_text="Handoffs one run may make; one more stops it with handoff_loop "
        "(so does handing it along a way it already went).",
    )
    # Whether it has handoff targets: kept by registry.services.agent_handoffs_sync
    # (the admin's save), so that a run of an agent without any reads no more.
    has_handoffs = models.BooleanField(default=False, editable=False)
    # Its enabled guardrails as its runs' snapshots record them (engine.guards),
    # kept by the guardrails app's signals: a run starts with them read from
    # this row, no query of its own, and an agent without any carries nothing.
    guardrail_specs = models.JSONField(default=list, blank=True, editable=False)
    answer_schema = models.JSONField(
        null=True,
        blank=True,
        help_text='A JSON Schema its final answer must match (README "Structured '
        'answers"): the model is asked for it, a mismatch gets one repair turn, '
        "then the run stops with bad_answer. Empty: free text.",
    )
    allowed_users, allowed_groups = _usable_by("usable_agents")

    class Meta(_Registered.Meta):
        db_table = "agents_agent"

    def clean(self) -> None:
        super().clean()
        if self.answer_schema not in (None, {}, ""):
            problem = schema_problem(self.answer_schema)
            if problem is not None:
                raise ValidationError({"answer_schema": problem})

    @property
    def effective_model(self) -> str:
        return self.model or settings.OPENAI_MODEL

    def limits(self) -> engine.Limits:
        return record_of(
            self,
            engine.Limits,
            time_budget_s=float(self.time_budget_s),
            stop_on_approval_expired=(
                self.on_approval_expired == self.OnApprovalExpired.STOP
            ),
            questions_read_only=(
                self.questions_read_only and settings.QUESTIONS_READ_ONLY
            ),
        )

    def routing(self) -> Routing | None:
        """The agent's toolsets (engine.routing), or None when it has none."""
        try:
            toolsets = check_toolsets(self.toolsets)
        except ValueError:
            return None
        if not toolsets:
            return None
        return Routing(toolsets=tuple(toolsets), ask_model=self.route_by_model)

    def offered_tools(self, names: Collection[str] | None = None) -> list[Tool]:
        """Enabled, confirmed tools chosen by name or by tag, in name order.

        ``names``: the tools chosen by name as a version recorded them (no query
        of the live choice).
        """
        named = set(
            self.tools.values_list("name", flat=True) if names is None else names
        )
        tags = set(self.tool_tags or [])
        return [
            tool
            for tool in Tool.objects.filter(enabled=True, confirmed=True)
            .select_related("mcp_server")
            .order_by("name")
            if tool.name in named or tags.intersection(tool.tags or [])
        ]


#: What an agent version records (registry.versions): every field a run of it
#: reads but its handoffs and who may use it. ``tools`` is kept by name.
AGENT_VERSIONED_FIELDS = (
    "instructions",
    "model",
    "tools",
    "tool_tags",
    "toolsets",
    "route_by_model",
    "questions_read_only",
    "max_steps",
    "max_tool_calls",
    "tool_error_limit",
    "consecutive_failure_limit",
    "time_budget_s",
    "token_budget",
    "context_budget_tokens",
    "parallel_tool_calls",
    "max_cost_usd",
    "on_approval_expired",
    "max_handoffs",
    # A structured answer's JSON Schema (issue 28): a new schema is a new version.
    "answer_schema",
)


class AgentVersion(models.Model):
    """An agent as one save left it (:data:`AGENT_VERSIONED_FIELDS`), numbered
    from 1 per agent; a run records the one it used (``Task.agent_version``)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    #: Why it was made, when not a plain edit ("rollback to v2", "demo seed").
    note = models.CharField(max_length=200, blank=True)
    changed_by = optional_user()
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent__name", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "number"], name="uniq_agent_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} v{self.number}"


class AgentLabel(models.Model):
    """A name (``production``, ``candidate``, any) pointing at one version of an
    agent; chats and the API run the version labelled ``production``."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="labels")
    name = models.SlugField(max_length=64)
    version = models.ForeignKey(
        AgentVersion, on_delete=models.PROTECT, related_name="labels"
    )
    moved_by = optional_user()
    moved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="uniq_agent_label")
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}@{self.name}"


class Handoff(models.Model):
    """An agent may hand the conversation to ``target``: offered to its runs'
    model as the tool ``transfer_to_<target>`` with ``description``
    (engine.handoff). Written through the admin's agent page, whose save keeps
    ``Agent.has_handoffs`` (registry.services.agent_handoffs_sync)."""

    source = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="handoffs")
    target = models.ForeignKey(
        Agent, on_delete=models.CASCADE, related_name="handoffs_to"
    )
    description = models.CharField(
        max_length=500,
        help_text="When to hand the conversation to this agent; the model reads it.",
    )

    class Meta:
        ordering = ["target__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "target"], name="uniq_handoff_target"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source_id} → {self.target_id}"

    def clean(self) -> None:
        if self.source_id is not None and self.source_id == self.target_id:
            raise ValidationError({"target": "An agent cannot hand off to itself."})
        if self.target_id is not None and len(self.target.name) > MAX_TARGET_NAME:
            raise ValidationError(
                {
                    "target": f"Its name is longer than {MAX_TARGET_NAME} characters: "
                    "a tool's name (transfer_to_<name>) holds 64."
                }
            )


class Tool(_Registered):
    """A tool the model may call: metadata, implementation and policy."""

    class Kind(models.TextChoices):  # the engine's ToolKind, with labels
        PYTHON = engine.ToolKind.PYTHON.value, "Python (built-in handler)"
        HTTP = engine.ToolKind.HTTP.value, "HTTP endpoint"
        MCP = engine.ToolKind.MCP.value, "MCP server tool"

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
    max_calls_per_run = models.PositiveIntegerField(
        default=0,
        help_text="Calls of it one run may make (0: no limit); a call over it is "
        "refused before it runs, and the model is told so.",
    )
    preview_template = models.CharField(max_length=300, blank=True)
    tags = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    confirmed = models.BooleanField(
        default=True,
        help_text="Imported tools start unconfirmed: an operator reviews the policy.",
    )
    version = models.PositiveIntegerField(default=1)
    # Not part of the definition (no new version): who may call a tool is not
    # what it does.
    allowed_users, allowed_groups = _usable_by("usable_tools")

    class Meta(_Registered.Meta):
        db_table = "agents_tool"

    def spec(self) -> engine.ToolSpec:
        return record_of(
            self,
            engine.ToolSpec,
            risk=engine.Risk(self.risk),
            approval=engine.ApprovalMode(self.approval),
            approval_rule=self.approval_rule or None,
            result_fields=tuple(self.result_fields or ()),
            tags=tuple(self.tags or ()),
            # Worked out from the HTTP settings (registry.services.spec_for).
            leaves_house=False,
        )


class ToolVersion(models.Model):
    """Every change of a tool's definition, with who and when."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    definition = models.JSONField()
    changed_by = optional_user()
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_toolversion"
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
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "stdio only: the environment the server gets beside PATH, HOME and the "
            'like, e.g. {"API_URL": "https://x", "API_TOKEN": "{{secret:X_TOKEN}}"}. '
            "{{secret:NAME}} is filled in from the secret store when it starts; "
            "nothing else of this process's environment reaches it."
        ),
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "agents_mcpserver"

    def __str__(self) -> str:
        return self.name


class Secret(models.Model):
    """A secret for HTTP tools, encrypted at rest; write-only in the admin."""

    name = models.CharField(max_length=64, unique=True)
    ciphertext = models.TextField()
    #: Which key of the keyring encrypted it (``registry.secrets.key_id``); blank
    #: for a secret stored before key ids were kept.
    key_id = models.CharField(max_length=12, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_secret"

    def __str__(self) -> str:
        return self.name


def _usd_per_million(tokens: str, **options: Any) -> models.DecimalField[Any, Any]:
    """A list price of ``tokens``: USD per million, never negative."""
    return models.DecimalField(
        f"{tokens} (USD per 1M tokens)",
        max_digits=12,
        decimal_places=6,
        validators=[MinValueValidator(0)],
        **options,
    )


class ModelPrice(models.Model):
    """List prices of a model, or of every model a glob pattern names.

    A run takes the most specific price of its model when it starts (an exact
    name before a pattern, then the longer pattern) and keeps it; edits apply
    from the next run on. A model no price names has no cost ("cost unknown").
    """

    pattern = models.CharField(
        max_length=200,
        unique=True,
        help_text="A model name (gpt-4o) or a glob pattern (gpt-4.1-mini*, "
        "claude-3-5-sonnet*), matched without regard to case.",
    )
    input_usd_per_m = _usd_per_million("input")
    cached_input_usd_per_m = _usd_per_million(
        "cached input",
        null=True,
        blank=True,
        help_text="Prompt tokens served from the endpoint's cache. Blank: the "
        "input price.",
    )
    output_usd_per_m = _usd_per_million("output")
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pattern"]

    def __str__(self) -> str:
        return self.pattern

    def price(self) -> EnginePrice:
        return EnginePrice(
            pattern=self.pattern,
            input_per_m=float(self.input_usd_per_m),
            output_per_m=float(self.output_usd_per_m),
            cached_input_per_m=(
                float(self.cached_input_usd_per_m)
                if self.cached_input_usd_per_m is not None
                else None
            ),
        )
