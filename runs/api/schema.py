"""OpenAPI documentation of the API's JSON shapes (docs/api.md), for drf-spectacular.

The views build their JSON with the payload functions in ``runs.payloads``; these
serializers only describe those shapes for ``/api/schema/`` and ``/api/docs/``.
What every operation shares (the refusals, their body, the session's scheme) is
``infra.api.schema``'s.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import serializers

from runs.models import Conversation, Message, QueuedMessage, Step, Task
from runs.payloads import STEP_KEYS


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "runs.api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from `manage.py issue_token USERNAME`.",
        }


class UsageSchema(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField(
        required=False, help_text="Prompt tokens served from the endpoint's cache"
    )
    estimated = serializers.BooleanField(
        required=False,
        help_text="True: the endpoint reported no usage; these are estimates",
    )


class ParentSchema(serializers.Serializer):
    task = serializers.CharField()
    seq = serializers.IntegerField()


class TaskSchema(serializers.Serializer):
    id = serializers.CharField()
    conversation = serializers.CharField()
    agent = serializers.CharField()
    model = serializers.CharField()
    status = serializers.ChoiceField(Task.Status.values)
    stop_reason = serializers.CharField(allow_null=True)
    final_answer = serializers.CharField(allow_null=True)
    usage = UsageSchema()
    steps = serializers.IntegerField()
    parent = ParentSchema(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cost_usd = serializers.FloatField(
        allow_null=True,
        help_text="USD of its own model calls at its price; null: the model has "
        "no price (cost unknown, never 0)",
    )
    usage_estimated = serializers.BooleanField(
        help_text="Some of its tokens are estimates (the endpoint reported none)"
    )
    source = serializers.CharField(
        allow_null=True,
        required=False,
        help_text='What started a run no one typed: "schedule:<id>", "trigger:<id>".',
    )
    intent = serializers.CharField(
        allow_null=True,
        help_text="The route chosen for the turn (toolset tags joined by +, none "
        "or general); null when the agent has no toolsets",
    )
    agent_version = serializers.IntegerField(
        allow_null=True,
        required=False,
        help_text="The number of the agent's version it ran (the one labelled "
        "production, else the newest); null on runs from before versions",
    )


class StepSchema(serializers.ModelSerializer):
    """A step: the keys of ``runs.payloads.STEP_KEYS``, typed as the model types
    its columns (declared here only where JSON says more)."""

    kind = serializers.ChoiceField(Step.Kind.values)
    status = serializers.CharField()
    attempts = serializers.JSONField(allow_null=True)
    usage = UsageSchema(allow_null=True)
    tainted_by = serializers.ListField(child=serializers.CharField(), allow_null=True)
    duration_ms = serializers.FloatField(allow_null=True)
    detail = serializers.JSONField(
        help_text="What the engine recorded about the step (notes' text, the "
        "approval and decision of a parked call, the route of a model call, a "
        "handoff's agents and the snapshot of the agent it hands to)"
    )
    cost_usd = serializers.FloatField(
        allow_null=True,
        help_text="A model call's USD at the run's price; null when unknown (no "
        "price) and on other kinds of step",
    )
    agent = serializers.CharField(
        allow_null=True,
        help_text="The agent acting when the step was made (a handoff hands the "
        "run to another), on runs whose agent may hand off; null on the others",
    )

    class Meta:
        model = Step
        fields = STEP_KEYS
        # Every key is present in every step (docs/api.md "Step"), null or not.
        extra_kwargs = {key: {"required": True} for key in STEP_KEYS}


class StepsSchema(serializers.Serializer):
    steps = StepSchema(many=True)


class MessageSchema(serializers.Serializer):
    role = serializers.ChoiceField(Message.Role.values)
    content = serializers.CharField()
    task = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


WEBHOOK_URL_HELP = (
    "Where each run's outcome is posted when it ends or waits for an approval "
    '(signed, retried; docs/api.md "Completion webhooks"). http(s); a private '
    "or loopback address only when REACH_INTERNAL_HOSTS lists it."
)


class ConversationSchema(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    created_at = serializers.DateTimeField()
    on_busy = serializers.ChoiceField(
        Conversation.OnBusy.values,
        help_text="What a message sent while a run goes on does.",
    )
    webhook_url = serializers.CharField(allow_null=True, help_text=WEBHOOK_URL_HELP)


class QueuedMessageSchema(serializers.Serializer):
    id = serializers.CharField()
    conversation = serializers.CharField()
    content = serializers.CharField()
    mode = serializers.ChoiceField(QueuedMessage.Mode.values)
    state = serializers.ChoiceField(
        QueuedMessage.State.values,
        help_text="queued until the run it waits for ends; started (task set) or "
        "failed (error says why)",
    )
    behind = serializers.CharField(
        allow_null=True, help_text="The run it waits for (its id)."
    )
    task = serializers.CharField(allow_null=True, help_text="The run it started.")
    error = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)


class MessageAcceptedSchema(serializers.Serializer):
    task = serializers.CharField(
        allow_null=True,
        help_text="The run the message started; null when it was queued.",
    )
    queued = QueuedMessageSchema(
        required=False,
        help_text="Present when a run was going on and the conversation queues "
        "(or interrupts): the message waiting to start.",
    )


class ConversationUpdateSchema(serializers.Serializer):
    on_busy = serializers.ChoiceField(Conversation.OnBusy.values, required=False)
    webhook_url = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, help_text=WEBHOOK_URL_HELP
    )


class ConversationDetailSchema(ConversationSchema):
    messages = MessageSchema(many=True)


class ConversationCreateSchema(serializers.Serializer):
    on_busy = serializers.ChoiceField(
        Conversation.OnBusy.values,
        required=False,
        help_text="Default: REACH_ON_BUSY (queue).",
    )
    webhook_url = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, help_text=WEBHOOK_URL_HELP
    )
    agent = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="Default (also when blank or null): the default agent",
    )


class MessageCreateSchema(serializers.Serializer):
    content = serializers.CharField()


class TaskRefSchema(serializers.Serializer):
    task = serializers.CharField()


class MessageConflictSchema(serializers.Serializer):
    """Why a conversation takes no message now: a task of it is still active
    (``task`` names it), or it holds an imported trace (read-only, no ``task``)."""

    task = serializers.CharField(required=False)
    error = serializers.CharField()
    detail = serializers.CharField(required=False)


class BudgetSchema(serializers.Serializer):
    max_cost_usd = serializers.FloatField(allow_null=True)
    max_tokens = serializers.IntegerField(allow_null=True)
    spent_cost_usd = serializers.FloatField()
    spent_tokens = serializers.IntegerField()
    resets_at = serializers.DateTimeField()


class BudgetExceededSchema(serializers.Serializer):
    """A message refused: the caller's daily budget is used up (or the API
    throttle refused the request: then only ``error`` and ``detail``)."""

    error = serializers.CharField()
    detail = serializers.CharField(required=False)
    resets_at = serializers.DateTimeField(
        required=False, help_text="When the daily budget resets"
    )
    budget = BudgetSchema(required=False)
