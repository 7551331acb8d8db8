"""OpenAPI documentation of the API's JSON shapes (API.md), for drf-spectacular.

The views build their JSON with the payload functions in ``runs.payloads``; these
serializers only describe those shapes for ``/api/schema/`` and ``/api/docs/``.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import serializers


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


class ParentSchema(serializers.Serializer):
    task = serializers.CharField()
    seq = serializers.IntegerField()


class TaskSchema(serializers.Serializer):
    id = serializers.CharField()
    conversation = serializers.CharField()
    agent = serializers.CharField()
    model = serializers.CharField()
    status = serializers.ChoiceField(
        [
            "queued",
            "running",
            "waiting_approval",
            "succeeded",
            "stopped",
            "failed",
            "cancelled",
        ]
    )
    stop_reason = serializers.CharField(allow_null=True)
    final_answer = serializers.CharField(allow_null=True)
    usage = UsageSchema()
    steps = serializers.IntegerField()
    parent = ParentSchema(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class StepSchema(serializers.Serializer):
    seq = serializers.IntegerField()
    rev = serializers.IntegerField()
    kind = serializers.ChoiceField(["model_call", "tool_call", "compaction", "note"])
    status = serializers.CharField()
    tool = serializers.CharField(allow_null=True)
    call_id = serializers.CharField(allow_null=True)
    arguments = serializers.JSONField(allow_null=True)
    raw_arguments = serializers.CharField(allow_null=True)
    proposed_arguments = serializers.JSONField(allow_null=True)
    result = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    attempts = serializers.JSONField(allow_null=True)
    model = serializers.CharField(allow_null=True)
    request_id = serializers.CharField(allow_null=True)
    response = serializers.JSONField(allow_null=True)
    usage = UsageSchema(allow_null=True)
    idempotency_key = serializers.CharField(allow_null=True)
    tainted_by = serializers.ListField(child=serializers.CharField(), allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.FloatField(allow_null=True)


class StepsSchema(serializers.Serializer):
    steps = StepSchema(many=True)


class MessageSchema(serializers.Serializer):
    role = serializers.ChoiceField(["user", "assistant"])
    content = serializers.CharField()
    task = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


class ConversationSchema(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    created_at = serializers.DateTimeField()


class ConversationDetailSchema(ConversationSchema):
    messages = MessageSchema(many=True)


class ConversationCreateSchema(serializers.Serializer):
    agent = serializers.CharField(
        required=False, help_text="Default: the default agent"
    )


class MessageCreateSchema(serializers.Serializer):
    content = serializers.CharField()


class TaskRefSchema(serializers.Serializer):
    task = serializers.CharField()


class AgentSchema(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    model = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())


class ToolSchema(serializers.Serializer):
    name = serializers.RegexField(r"^[a-z][a-z0-9_]{1,63}$")
    description = serializers.CharField()
    parameters = serializers.JSONField(help_text="JSON Schema with an object root")
    kind = serializers.ChoiceField(["python", "http", "mcp"])
    risk = serializers.ChoiceField(
        ["read_only", "write", "irreversible"], required=False
    )
    approval = serializers.ChoiceField(["never", "always", "rule"], required=False)
    approval_rule = serializers.CharField(allow_null=True, required=False)
    approvals_required = serializers.IntegerField(required=False)
    approval_ttl_s = serializers.IntegerField(required=False)
    untrusted_output = serializers.BooleanField(required=False)
    idempotent = serializers.BooleanField(required=False)
    timeout_s = serializers.FloatField(required=False)
    max_retries = serializers.IntegerField(required=False)
    max_result_chars = serializers.IntegerField(required=False)
    result_fields = serializers.ListField(child=serializers.CharField(), required=False)
    cache_ttl_s = serializers.IntegerField(required=False)
    rate_limit_per_min = serializers.IntegerField(required=False)
    preview_template = serializers.CharField(required=False)
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    enabled = serializers.BooleanField(required=False)
    http = serializers.JSONField(required=False)
    version = serializers.IntegerField(read_only=True)


class ToolVersionSchema(serializers.Serializer):
    version = serializers.IntegerField()
    changed_by = serializers.CharField(allow_null=True)
    changed_at = serializers.DateTimeField()
    definition = ToolSchema()


class NoteSchema(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    title = serializers.CharField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField(read_only=True)


class ApprovalSchema(serializers.Serializer):
    id = serializers.CharField()
    task = serializers.CharField()
    step = serializers.IntegerField()
    tool = serializers.CharField()
    risk = serializers.CharField()
    arguments = serializers.JSONField()
    proposed_arguments = serializers.JSONField(allow_null=True)
    preview = serializers.CharField()
    status = serializers.ChoiceField(
        ["pending", "approved", "rejected", "expired", "cancelled"]
    )
    tainted_by = serializers.ListField(child=serializers.CharField())
    approvals_required = serializers.IntegerField()
    approved_by = serializers.ListField(child=serializers.CharField())
    requested_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_null=True)


class DecisionSchema(serializers.Serializer):
    decision = serializers.ChoiceField(["approve", "reject"])
    arguments = serializers.JSONField(required=False, help_text="A full replacement")
    reason = serializers.CharField(required=False, help_text="Required to reject")


class ErrorSchema(serializers.Serializer):
    error = serializers.CharField()
