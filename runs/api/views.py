"""The JSON API of API.md: agents, tools, notes, conversations, tasks, steps."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.common import error_response, paginate, redacted
from infra.api.schema import ErrorSchema
from registry.access import (
    may_use_agent,
    offered_tools_for,
    usable_agents,
    usable_tools_of,
)
from registry.models import Agent, Tool
from registry.payloads import tool_definition
from registry.permissions import can_register_tools
from registry.services import tool_from_definition, tool_save
from runs import selectors
from runs import services as runs
from runs.api import schema
from runs.api.common import own_conversation_or_404, visible_task_or_404
from runs.budgets import DailyBudgetExceeded
from runs.payloads import conversation_payload, step_payload, task_payload


class AgentList(APIView):
    @extend_schema(
        responses=schema.AgentSchema(many=True),
        description="Newest first: the agents the caller may use, each with the "
        "tools its runs offer the caller.",
    )
    def get(self, request: Request) -> Response:
        agents = usable_agents(request.user).order_by("-created_at", "-id")
        page, headers = paginate(request, agents)
        return Response(
            [
                {
                    "name": a.name,
                    "description": a.description,
                    "model": a.effective_model,
                    "tools": [t.name for t in offered_tools_for(a, request.user)],
                    "default": a.is_default,
                }
                for a in page
            ],
            headers=headers,
        )


def _listed_tools(user: Any) -> QuerySet[Tool]:
    """The registry as ``user`` may read it: all of it for those who register
    tools, else the tools they may use (a hidden tool is not found)."""
    tools = Tool.objects.order_by("-created_at", "-id")
    return tools if can_register_tools(user) else usable_tools_of(user, tools)


class ToolList(APIView):
    @extend_schema(
        responses=schema.ToolSchema(many=True),
        description="Every tool for admins; for others, the tools they may use.",
    )
    def get(self, request: Request) -> Response:
        page, headers = paginate(request, _listed_tools(request.user))
        return Response([tool_definition(t) for t in page], headers=headers)

    @extend_schema(
        request=schema.ToolSchema,
        responses={201: schema.ToolSchema, 200: schema.ToolSchema},
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
    @extend_schema(responses=schema.ToolVersionSchema(many=True))
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


class ConversationList(APIView):
    @extend_schema(
        responses=schema.ConversationSchema(many=True),
        operation_id="conversations_list",
    )
    def get(self, request: Request) -> Response:
        conversations = selectors.own_conversations(request.user)
        page, headers = paginate(request, conversations.order_by("-updated_at"))
        return Response([conversation_payload(c) for c in page], headers=headers)

    @extend_schema(
        request=schema.ConversationCreateSchema,
        responses={201: schema.ConversationSchema},
    )
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise ApiValidationError({"detail": ['Send {"agent": name} or {}.']})
        name = request.data.get("agent")
        if name is not None and not isinstance(name, str):
            raise ApiValidationError({"agent": ["agent is an agent's name."]})
        if name:
            agent = Agent.objects.filter(name=name).first()
            if agent is None:
                raise ApiValidationError({"agent": [f"No agent named '{name}'."]})
            if not may_use_agent(request.user, agent):
                raise PermissionDenied(_not_yours(agent))
        else:
            agent = selectors.default_agent(request.user)
            if agent is None:
                raise ApiValidationError({"agent": ["No agent is configured."]})
        conversation = runs.conversation_create(owner=request.user, agent=agent)
        return Response(
            conversation_payload(conversation), status=status.HTTP_201_CREATED
        )


def _not_yours(agent: Agent) -> str:
    return (
        f"You may not use the agent '{agent.name}'; an admin can give you access "
        "(Admin → Agents → who may use it)."
    )


class ConversationDetail(APIView):
    @extend_schema(responses=schema.ConversationDetailSchema)
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = own_conversation_or_404(request, conversation_id)
        return Response(redacted(conversation_payload(conversation, messages=True)))


class ConversationMessages(APIView):
    @extend_schema(
        request=schema.MessageCreateSchema,
        responses={
            202: schema.TaskRefSchema,
            409: schema.MessageConflictSchema,
            429: schema.BudgetExceededSchema,
        },
        description="Starts a run. 429 when the caller's daily budget is used up "
        "(the body and Retry-After say when it resets) or the API throttle "
        "refuses the request.",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = own_conversation_or_404(request, conversation_id)
        content = (
            request.data.get("content") if isinstance(request.data, dict) else None
        )
        if not isinstance(content, str) or not content.strip():
            raise ApiValidationError({"content": ["Send the message text as content."]})
        if not may_use_agent(request.user, conversation.agent):
            raise PermissionDenied(_not_yours(conversation.agent))
        try:
            task = runs.task_start(
                conversation=conversation, content=content, enforce_budget=True
            )
        except DailyBudgetExceeded as refused:
            message = str(refused)
            return Response(
                {
                    "error": message,
                    "detail": message,
                    "budget": refused.status.as_json(),
                    "resets_at": refused.status.resets_at.isoformat(),
                },
                status=status.HTTP_429_TOO_MANY_REQUESTS,
                headers={"Retry-After": str(refused.status.retry_after_s())},
            )
        except runs.ConversationBusy as busy:
            return Response(
                {
                    "task": str(busy.task.pk),
                    "error": "A task of this conversation is still active.",
                },
                status=status.HTTP_409_CONFLICT,
            )
        except runs.ConversationReadOnly as exc:
            return error_response(str(exc), status.HTTP_409_CONFLICT)
        except ValueError as exc:
            raise ApiValidationError({"content": [str(exc)]}) from exc
        return Response({"task": str(task.pk)}, status=status.HTTP_202_ACCEPTED)


class TaskList(APIView):
    @extend_schema(
        responses=schema.TaskSchema(many=True),
        operation_id="tasks_list",
        parameters=[
            OpenApiParameter(
                "intent", str, description="Only runs given this intent (route)"
            )
        ],
    )
    def get(self, request: Request) -> Response:
        tasks = selectors.own_tasks(request.user)
        if intent := request.query_params.get("intent"):
            tasks = tasks.filter(intent=intent)
        page, headers = paginate(request, tasks.order_by("-created_at"))
        return Response([redacted(task_payload(t)) for t in page], headers=headers)


class TaskDetail(APIView):
    @extend_schema(responses=schema.TaskSchema)
    def get(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id, brief=True)
        return Response(redacted(task_payload(task)))


class TaskSteps(APIView):
    @extend_schema(responses=schema.StepsSchema)
    def get(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id)
        try:
            after = int(request.query_params.get("after", 0))
        except ValueError as exc:
            raise ApiValidationError({"after": ["after is an integer rev."]}) from exc
        steps = task.steps.filter(rev__gt=after).order_by("rev")
        return Response({"steps": [redacted(step_payload(s)) for s in steps]})


class TaskCancel(APIView):
    @extend_schema(request=None, responses={202: schema.TaskSchema, 409: ErrorSchema})
    def post(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id)
        user = request.user
        if not (task.owner_id == user.pk or user.is_superuser):
            raise PermissionDenied("Only the task's owner or an admin can cancel it.")
        try:
            task = runs.task_cancel(task=task, user=user)
        except runs.TaskFinal:
            return Response(
                {"error": f"The task is already {task.status}.", "task": str(task.pk)},
                status=status.HTTP_409_CONFLICT,
            )
        task.refresh_from_db()
        return Response(redacted(task_payload(task)), status=status.HTTP_202_ACCEPTED)
