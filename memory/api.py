"""``/api/memories/``: a user's own memory items; admins also agents' ones.

``GET`` lists (``?q=`` searches, ranked), ``POST`` adds a fact (a person is its
source), ``GET``/``PATCH``/``DELETE`` on ``/api/memories/{id}/`` read, correct
and delete one. Someone else's item answers 404, as every object of others does.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import Http404
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.common import page_window, paginate, redacted
from infra.api.schema import ErrorSchema
from memory import services
from memory.models import MemoryItem
from memory.payloads import memory_payload
from memory.permissions import can_manage_agent_memory
from registry.models import Agent


class MemorySourceSchema(serializers.Serializer):
    kind = serializers.ChoiceField(MemoryItem.SourceKind.values)
    task = serializers.CharField(allow_null=True)
    step = serializers.IntegerField(allow_null=True)
    user = serializers.CharField(allow_null=True)
    label = serializers.CharField()


class MemorySchema(serializers.Serializer):
    id = serializers.CharField()
    scope = serializers.ChoiceField(MemoryItem.Scope.values)
    user = serializers.CharField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    subject = serializers.CharField(allow_blank=True)
    text = serializers.CharField()
    status = serializers.ChoiceField(MemoryItem.Status.values)
    state = serializers.ChoiceField(["live", "expired", "superseded", "forgotten"])
    expired = serializers.BooleanField()
    tainted = serializers.BooleanField()
    tainted_by = serializers.ListField(child=serializers.CharField())
    source = MemorySourceSchema()
    supersedes = serializers.CharField(allow_null=True)
    superseded_by = serializers.CharField(allow_null=True)
    forgotten_by = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


class MemoryDetailSchema(MemorySchema):
    history = MemorySchema(many=True, help_text="The older versions, newest first")


class MemoryChangeSchema(serializers.Serializer):
    subject = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=services.MAX_SUBJECT_CHARS,
        help_text="A later fact on the same subject supersedes this one",
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="null: kept until deleted"
    )
    days = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=services.MAX_DAYS,
        help_text="Instead of expires_at: keep it this many days from now",
    )


class MemoryCreateSchema(MemoryChangeSchema):
    text = serializers.CharField(max_length=services.MAX_TEXT_CHARS)
    scope = serializers.ChoiceField(
        MemoryItem.Scope.values,
        required=False,
        help_text="user (default): your own; agent: what an agent knows for "
        "everyone (admins)",
    )
    agent = serializers.CharField(
        required=False, help_text="The agent's name, with scope agent"
    )


class MemoryUpdateSchema(MemoryChangeSchema):
    text = serializers.CharField(required=False, max_length=services.MAX_TEXT_CHARS)


#: The furthest page a list reaches (memory is a person's, not a corpus).
MAX_OFFSET = 100_000

LIST_PARAMETERS = [
    OpenApiParameter("q", OpenApiTypes.STR, description="Search (ranked, best first)"),
    OpenApiParameter(
        "scope",
        OpenApiTypes.STR,
        enum=MemoryItem.Scope.values,
        description="user (default): your own; agent: agents' items (admins)",
    ),
    OpenApiParameter("agent", OpenApiTypes.STR, description="With scope agent"),
    OpenApiParameter(
        "history",
        OpenApiTypes.BOOL,
        description="Also superseded and forgotten items",
    ),
    OpenApiParameter("limit", OpenApiTypes.INT),
    OpenApiParameter("offset", OpenApiTypes.INT, description=f"At most {MAX_OFFSET}"),
]


def _flag(request: Request, name: str) -> bool:
    """A boolean query parameter, as OpenAPI writes one: ``true`` or ``false``."""
    if name not in request.query_params:
        return False
    raw = request.query_params[name]
    if raw not in ("true", "false"):
        raise ApiValidationError({name: [f"{name} is true or false."]})
    return raw == "true"


def _choice(value: Any, name: str, choices: list[str]) -> str:
    if value not in choices:
        raise ApiValidationError({name: [f"{name} is one of: {', '.join(choices)}."]})
    return str(value)


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ApiValidationError({"detail": ["Send a JSON object."]})
    return request.data


def _text(data: dict[str, Any], name: str, limit: int | None = None) -> str | None:
    """A text field of the body; None when it is not there (null is refused)."""
    if name not in data:
        return None
    value = data[name]
    if not isinstance(value, str):
        raise ApiValidationError({name: [f"{name} is text."]})
    if limit is not None and len(value) > limit:
        raise ApiValidationError({name: [f"{name} is at most {limit} characters."]})
    return value


def _expiry(data: dict[str, Any]) -> Any:
    """The expiry a body asks for: a datetime, None (keep), or absent (unset)."""
    if "days" in data and data["days"] is not None:
        if "expires_at" in data and data["expires_at"] is not None:
            raise ApiValidationError({"days": ["Send days or expires_at, not both."]})
        try:
            return services.expiry_in(data["days"])
        except services.MemoryInvalid as exc:
            raise ApiValidationError({"days": [str(exc)]}) from exc
    if "expires_at" not in data:
        return None if "days" in data else services.UNSET
    raw = data["expires_at"]
    if raw is None:
        return None
    try:
        parsed = parse_datetime(raw) if isinstance(raw, str) else None
    except ValueError:  # well formed, but no such date
        parsed = None
    if parsed is None:
        raise ApiValidationError(
            {"expires_at": ["expires_at is an ISO 8601 date and time, or null."]}
        )
    try:
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.astimezone(dt.UTC)
    except (OverflowError, ValueError) as exc:
        raise ApiValidationError(
            {"expires_at": ["expires_at is out of range."]}
        ) from exc


def _item_or_404(request: Request, memory_id: Any) -> MemoryItem:
    item = services.visible_item(request.user, memory_id)
    if item is None:
        raise Http404
    return item


class MemoryList(APIView):
    @extend_schema(
        parameters=LIST_PARAMETERS,
        responses=MemorySchema(many=True),
        operation_id="memories_list",
        description="Newest first; best first with q.",
    )
    def get(self, request: Request) -> Response:
        user = request.user
        params = request.query_params
        history = _flag(request, "history")
        scope = _choice(
            params.get("scope", MemoryItem.Scope.USER), "scope", MemoryItem.Scope.values
        )
        owner: dict[str, Any] = {}
        if scope == MemoryItem.Scope.USER:
            owner["user"] = user
        elif scope == MemoryItem.Scope.AGENT:
            if not can_manage_agent_memory(user):
                raise PermissionDenied("Only admins read agents' memory.")
            name = params.get("agent")
            if name:
                agent = Agent.objects.filter(name=name).first()
                if agent is None:
                    raise ApiValidationError({"agent": [f"No agent named '{name}'."]})
                owner["agent"] = agent
            else:
                owner["any_agent"] = True
        limit, offset = page_window(request)
        if offset > MAX_OFFSET:
            # Past what any database takes as an OFFSET (and past any page).
            raise ApiValidationError({"offset": [f"offset is at most {MAX_OFFSET}."]})
        items = services.memory_list(
            query=str(params.get("q", "")),
            history=history,
            limit=offset + limit + 1,
            **owner,
        )
        page, headers = paginate(request, items)
        return Response([redacted(memory_payload(i)) for i in page], headers=headers)

    @extend_schema(
        request=MemoryCreateSchema,
        responses={201: MemorySchema},
        operation_id="memories_create",
    )
    def post(self, request: Request) -> Response:
        data = _body(request)
        scope = _choice(
            data.get("scope", MemoryItem.Scope.USER), "scope", MemoryItem.Scope.values
        )
        name = _text(data, "agent")
        owner: dict[str, Any] = {}
        if scope == MemoryItem.Scope.USER:
            owner["user"] = request.user
        else:
            if not can_manage_agent_memory(request.user):
                raise PermissionDenied("Only admins write what an agent remembers.")
            agent = Agent.objects.filter(name=name).first() if name else None
            if agent is None:
                raise ApiValidationError({"agent": ["Name an existing agent."]})
            owner["agent"] = agent
        text = _text(data, "text", services.MAX_TEXT_CHARS)
        if text is None:
            raise ApiValidationError({"text": ["text is required."]})
        expires_at = _expiry(data)
        try:
            item = services.memory_write(
                scope=scope,
                text=text,
                subject=_text(data, "subject", services.MAX_SUBJECT_CHARS) or "",
                expires_at=(
                    services.expiry_in(None)
                    if expires_at is services.UNSET
                    else expires_at
                ),
                source=services.Source.person(request.user),
                **owner,
            )
        except services.MemoryInvalid as exc:
            raise ApiValidationError({"detail": [str(exc)]}) from exc
        item = services.visible_item(request.user, item.pk) or item
        return Response(redacted(memory_payload(item)), status=status.HTTP_201_CREATED)


class MemoryDetail(APIView):
    @extend_schema(responses=MemoryDetailSchema, operation_id="memories_retrieve")
    def get(self, request: Request, memory_id: str) -> Response:
        item = _item_or_404(request, memory_id)
        payload = memory_payload(item)
        payload["history"] = [memory_payload(i) for i in services.history_of(item)]
        return Response(redacted(payload))

    @extend_schema(
        request=MemoryUpdateSchema,
        responses={200: MemorySchema, 409: ErrorSchema},
        operation_id="memories_partial_update",
    )
    def patch(self, request: Request, memory_id: str) -> Response:
        item = _item_or_404(request, memory_id)
        data = _body(request)
        try:
            item = services.memory_update(
                item=item,
                actor=request.user,
                text=_text(data, "text", services.MAX_TEXT_CHARS),
                subject=_text(data, "subject", services.MAX_SUBJECT_CHARS),
                expires_at=_expiry(data),
            )
        except services.MemoryConflict:
            raise  # its kind's status (infra.api.errors), not a field error
        except services.MemoryInvalid as exc:
            raise ApiValidationError({"detail": [str(exc)]}) from exc
        except MemoryItem.DoesNotExist as exc:  # deleted meanwhile
            raise Http404 from exc
        return Response(redacted(memory_payload(_item_or_404(request, item.pk))))

    @extend_schema(request=None, responses={204: None}, operation_id="memories_destroy")
    def delete(self, request: Request, memory_id: str) -> Response:
        item = _item_or_404(request, memory_id)
        try:
            services.memory_delete(item=item, actor=request.user)
        except MemoryItem.DoesNotExist as exc:  # deleted meanwhile
            raise Http404 from exc
        return Response(status=status.HTTP_204_NO_CONTENT)
