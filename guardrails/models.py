"""A guardrail: one check of one stage of an agent's runs (engine.guards).

Configured per agent in the admin (the agent's page, or Guardrails); a run
records its agent's enabled guardrails in its snapshot when it starts, so a
change applies to the runs that start after it.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from engine.guards import (
    GuardAction,
    GuardKind,
    GuardSpec,
    GuardStage,
    PersonalData,
    blocklist_patterns,
)
from registry.models import Agent


class GuardrailAuditKind(models.TextChoices):
    """The audit events of this app (``audit.AuditEvent.kind``)."""

    TRIPPED = "guardrail.tripped"
    CHANGED = "guardrail.changed"


class Guardrail(models.Model):
    Kind = models.TextChoices("Kind", [(k.name, k.value) for k in GuardKind])
    Stage = models.TextChoices("Stage", [(s.name, s.value) for s in GuardStage])
    Action = models.TextChoices("Action", [(a.name, a.value) for a in GuardAction])

    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, related_name="guardrails"
    )
    name = models.SlugField(
        max_length=64,
        help_text="What the trace, the audit log and a blocked user read.",
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    stage = models.CharField(
        max_length=20,
        choices=Stage.choices,
        help_text="input: the user's message, before the model reads it; "
        "tool_result: a tool's result, before the model reads it; answer: the "
        "final answer, before the user reads it.",
    )
    action = models.CharField(
        max_length=10,
        choices=Action.choices,
        help_text="block: the run stops (stop reason guardrail); redact: what was "
        "found is masked; flag: recorded only.",
    )
    config = models.JSONField(
        default=dict,
        blank=True,
        help_text='personal_data: {"types": ["card_number", "iban", "cn_id", '
        '"email", "phone"]} (none: all); blocklist: {"words": [...], "patterns": '
        '[...]}; max_length: {"max_chars": n}; classifier: {"rubric": "...", '
        '"model": "..."} (no model: the configured one); secrets: nothing.',
    )
    enabled = models.BooleanField(default=True)
    position = models.PositiveIntegerField(
        default=0, help_text="The order its stage's checks run in (lowest first)."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["agent", "position", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "name"], name="uniq_guardrail_name_per_agent"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent.name}/{self.name} ({self.kind} {self.stage} {self.action})"

    def clean(self) -> None:
        super().clean()
        problem = config_problem(self.kind, self.action, self.config)
        if problem is not None:
            raise ValidationError({"config": problem})

    def spec(self) -> GuardSpec:
        return GuardSpec(
            name=self.name,
            kind=GuardKind(self.kind),
            stage=GuardStage(self.stage),
            action=GuardAction(self.action),
            config=dict(self.config or {}),
        )


def config_problem(kind: str, action: str, config: Any) -> str | None:
    """Why ``config`` cannot configure a guardrail of ``kind`` (None: it can)."""
    if not isinstance(config, dict):
        return "An object."
    if kind == GuardKind.PERSONAL_DATA:
        types = config.get("types") or []
        known = {p.value for p in PersonalData}
        if not isinstance(types, list) or not set(types) <= known:
            return f"types: a list of {', '.join(sorted(known))}."
    elif kind == GuardKind.BLOCKLIST:
        if not (config.get("words") or config.get("patterns")):
            return "words or patterns: a list of what to look for."
        try:
            blocklist_patterns(config)
        except re.error as exc:
            return f"patterns: {exc}"
    elif kind == GuardKind.MAX_LENGTH:
        limit = config.get("max_chars")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            return "max_chars: a positive number of characters."
    elif kind == GuardKind.CLASSIFIER:
        if not str(config.get("rubric") or "").strip():
            return "rubric: what the classifier trips on."
        if action == GuardAction.REDACT:
            return "A classifier cannot say what to mask: block or flag."
    return None
