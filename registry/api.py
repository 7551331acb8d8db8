"""The registry's JSON API (docs/api.md): the agents the caller may use, the tools
(listed, registered) and a tool's versions."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from engine.planning import TOOL_NAME_RE
from infra.api.common import paginate
from registry import access
from registry.access import usable_agents, usable_tools_of
from registry.models import Agent, Tool
from registry.payloads import TOOL_FIELDS, TOOL_REQUIRED_FIELDS, tool_definition
from registry.permissions import can_register_tools
from registry.services import (
    agent_as_run,
    handoffs_of,
    tool_from_definition,
    tool_save,
)


class AgentSchema(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    model = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    handoffs = serializers.ListField(
        child=serializers.CharField(),
        help_text="The agents it may hand a conversation to (offered to its model "
        "as transfer_to_<agent>)",
    )


class MCPToolSchema(serializers.Serializer):
    server = serializers.CharField(allow_null=True)
    tool = serializers.CharField()


class ToolSchema(serializers.ModelSerializer):
    """A tool definition: the fields of ``registry.payloads.TOOL_FIELDS``, typed as
    the model types them (declared here only where JSON says more)."""

    name = serializers.RegexField(TOOL_NAME_RE.pattern)
    result_fields = serializers.ListField(child=serializers.CharField(), required=False)
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    mcp = MCPToolSchema(
        required=False, help_text="kind mcp: the registered server and its tool"
    )

    class Meta:
        model = Tool
        # Then the implementation, by kind (python: handler; http; mcp).
        fields = (*TOOL_FIELDS, "handler", "http", "mcp", "version")
        read_only_fields = ("version",)
        extra_kwargs = {
            name: {"required": name in TOOL_REQUIRED_FIELDS} for name in TOOL_FIELDS
        } | {
            "parameters": {
                "required": True,
                "help_text": "JSON Schema with an object root",
            },
            "handler": {"required": False},
            "http": {"required": False},
        }

    def build_standard_field(self, field_name: str, model_field: Any) -> Any:
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        # Drop the database's integer range: it is not the API's, and differs
        # between SQLite and PostgreSQL.
        kwargs.pop("max_value", None)
        return field_class, kwargs


class ToolVersionSchema(serializers.Serializer):
    version = serializers.IntegerField()
    changed_by = serializers.CharField(allow_null=True)
    changed_at = serializers.DateTimeField()
    definition = ToolSchema()


class AgentList(APIView):
    @extend_schema(
        responses=AgentSchema(many=True),
        description="Newest first: the agents the caller may use, each with the "
        "tools its runs offer the caller.",
    )
    def get(self, request: Request) -> Response:
        agents = usable_agents(request.user).order_by("-created_at", "-id")
        page, headers = paginate(request, agents)
        return Response([self._agent(a, request.user) for a in page], headers=headers)

    @staticmethod
    def _agent(agent: Agent, user: Any) -> dict[str, Any]:
        # As a run started now would use it: the version chats run.
        running, names = agent_as_run(agent)
        return {
            "name": agent.name,
            "description": agent.description,
            "model": running.effective_model,
            "tools": [
                t.name for t in access.usable_tools(user, running.offered_tools(names))
            ],
            "default": agent.is_default,
            # No query for an agent without handoff targets.
            "handoffs": (
                [t["agent"] for t in handoffs_of(agent)] if agent.has_handoffs else []
            ),
            # The JSON Schema of its final answer (null: free text).
            "answer_schema": running.answer_schema or None,
        }


def _listed_tools(user: Any) -> QuerySet[Tool]:
    """The registry as ``user`` may read it: all of it for those who register
    tools, else the tools they may use (a hidden tool is not found)."""
    tools = Tool.objects.order_by("-created_at", "-id")
    return tools if can_register_tools(user) else usable_tools_of(user, tools)


class ToolList(APIView):
    @extend_schema(
        responses=ToolSchema(many=True),
        description="Every tool for admins; for others, the tools they may use.",
    )
    def get(self, request: Request) -> Response:
        page, headers = paginate(request, _listed_tools(request.user))
        return Response([tool_definition(t) for t in page], headers=headers)

    @extend_schema(
        request=ToolSchema,
        responses={201: ToolSchema, 200: ToolSchema},
    )
    def post(self, request: Request) -> Response:
        if not can_register_tools(request.user):
            raise PermissionDenied("Only admins register tools.")
        if not isinstance(request.data, dict):
            raise ApiValidationError({"detail": ["Send a tool definition object."]})
        try:
            tool = tool_from_definition(request.data)
            tool, changed = tool_save(tool=tool, user=request.user)
        except ValidationError as exc:
            raise ApiValidationError(exc.message_dict) from exc
        code = status.HTTP_201_CREATED if changed else status.HTTP_200_OK
        return Response(tool_definition(tool), status=code)


class ToolVersions(APIView):
    @extend_schema(responses=ToolVersionSchema(many=True))
    def get(self, request: Request, name: str) -> Response:
        tool = _listed_tools(request.user).filter(name=name).first()
        if tool is None:
            raise Http404
        versions = tool.versions.select_related("changed_by").order_by("-version")
        page, headers = paginate(request, versions)
        return Response(
            [
                {
                    "version": v.version,
                    "changed_by": v.changed_by.get_username() if v.changed_by else None,
                    "changed_at": v.changed_at.isoformat(),
                    "definition": v.definition,
                }
                for v in page
            ],
            headers=headers,
        )
