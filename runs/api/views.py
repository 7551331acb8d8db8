"""The JSON API of docs/api.md: conversations, tasks, steps (the registry's agents and
tools are ``registry.api``'s, the notes ``effects.api``'s)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.common import paginate, redacted
from infra.api.errors import http_status
from infra.api.schema import ErrorSchema
from infra.errors import ServiceError
from registry.access import may_use_agent
from registry.models import Agent
from runs import selectors
from runs import services as runs
from runs.api import schema
from runs.api.common import own_conversation_or_404, visible_task_or_404
from runs.models import Conversation
from runs.payloads import (
    conversation_payload,
    queued_payload,
    step_payload,
    task_payload,
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
        on_busy = _on_busy(request.data)
        webhook_url = _webhook_url(request.data) or ""
        conversation = runs.conversation_create(
            owner=request.user, agent=agent, on_busy=on_busy, webhook_url=webhook_url
        )
        return Response(
            conversation_payload(conversation), status=status.HTTP_201_CREATED
        )


def _on_busy(data: dict[str, Any]) -> str | None:
    if "on_busy" not in data:
        return None
    value = data["on_busy"]
    if not isinstance(value, str) or value not in Conversation.OnBusy.values:
        choices = ", ".join(Conversation.OnBusy.values)
        raise ApiValidationError({"on_busy": [f"on_busy is one of: {choices}."]})
    return str(value)


def _webhook_url(data: dict[str, Any]) -> str | None:
    """The checked ``webhook_url`` of ``data`` ("" to clear it); None when
    ``data`` does not name one."""
    if "webhook_url" not in data:
        return None
    try:
        return runs.webhook_url_checked(data["webhook_url"])
    except runs.WebhookUrlInvalid as refused:
        raise ApiValidationError({"webhook_url": [refused.message]}) from refused


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

    @extend_schema(
        request=schema.ConversationUpdateSchema,
        responses={200: schema.ConversationSchema},
        description="Choose what a message sent while a run goes on does, and "
        "where the outcome of its runs is posted (webhook_url; null to stop).",
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        conversation = own_conversation_or_404(request, conversation_id)
        if not isinstance(request.data, dict) or not (
            "on_busy" in request.data or "webhook_url" in request.data
        ):
            raise ApiValidationError({"on_busy": ['Send {"on_busy": choice}.']})
        on_busy = _on_busy(request.data)
        webhook_url = _webhook_url(request.data)
        if on_busy is not None:
            conversation = runs.conversation_set_on_busy(
                conversation=conversation, on_busy=on_busy
            )
        if webhook_url is not None:
            conversation = runs.conversation_set_webhook(
                conversation=conversation, webhook_url=webhook_url
            )
        return Response(conversation_payload(conversation))


class ConversationQueue(APIView):
    @extend_schema(
        responses=schema.QueuedMessageSchema(many=True),
        description="The messages sent while a run went on, oldest first.",
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = own_conversation_or_404(request, conversation_id)
        rows = conversation.queued_messages.order_by("created_at", "id")
        page, headers = paginate(request, rows)
        return Response([redacted(queued_payload(q)) for q in page], headers=headers)


class ConversationMessages(APIView):
    @extend_schema(
        request=schema.MessageCreateSchema,
        responses={
            202: schema.MessageAcceptedSchema,
            409: schema.MessageConflictSchema,
            429: schema.BudgetExceededSchema,
        },
        description="Starts a run. While a run goes on, the conversation's on_busy "
        "decides: queue (202 with the queued message, started when the run "
        "ends), interrupt (202 likewise; the run is cancelled at its next step "
        "boundary and a new one answers both messages) or refuse (409 with the "
        "active task). 429 when the caller's daily budget is used up (the body "
        "and Retry-After say when it resets) or the API throttle refuses the "
        "request.",
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
        # A spent daily budget (429) and a read-only conversation (409) answer
        # their kinds' statuses (infra.api.errors).
        try:
            sent = runs.message_send(
                conversation=conversation, content=content, enforce_budget=True
            )
        except runs.ConversationBusy as busy:
            return Response(
                {
                    "task": str(busy.task.pk),
                    "error": "A task of this conversation is still active.",
                },
                status=http_status(busy),
            )
        except ServiceError:
            raise
        except ValueError as exc:
            raise ApiValidationError({"content": [str(exc)]}) from exc
        if sent.queued is not None:
            return Response(
                {"task": None, "queued": redacted(queued_payload(sent.queued))},
                status=status.HTTP_202_ACCEPTED,
            )
        assert sent.task is not None
        return Response({"task": str(sent.task.pk)}, status=status.HTTP_202_ACCEPTED)


class TaskList(APIView):
    @extend_schema(
        responses=schema.TaskSchema(many=True),
        operation_id="tasks_list",
        parameters=[
            OpenApiParameter(
                "intent", str, description="Only runs given this intent (route)"
            ),
            OpenApiParameter("agent", str, description="Only runs of this agent"),
            OpenApiParameter(
                "agent_version",
                int,
                description="Only runs of this version of their agent",
            ),
        ],
    )
    def get(self, request: Request) -> Response:
        tasks = selectors.own_tasks(request.user)
        if intent := request.query_params.get("intent"):
            tasks = tasks.filter(intent=intent)
        if agent := request.query_params.get("agent"):
            tasks = tasks.filter(agent__name=agent)
        if (version := request.query_params.get("agent_version")) is not None:
            if not version.strip().isdigit():
                raise ApiValidationError(
                    {"agent_version": ["agent_version is a version number."]}
                )
            tasks = selectors.filter_agent_version(tasks, version)
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
        except runs.TaskFinal as final:
            return Response(
                {"error": f"The task is already {task.status}.", "task": str(task.pk)},
                status=http_status(final),
            )
        task.refresh_from_db()
        return Response(redacted(task_payload(task)), status=status.HTTP_202_ACCEPTED)
