"""The notes API (the knowledge ``search_notes`` reads)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.permissions import can_audit
from effects.models import Note
from infra.api.common import paginate
from registry.permissions import can_register_tools


class NoteSchema(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    title = serializers.CharField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField(read_only=True)


class NoteList(APIView):
    @extend_schema(responses=NoteSchema(many=True))
    def get(self, request: Request) -> Response:
        notes = Note.objects.order_by("-created_at", "-id")
        query = request.query_params.get("q", "").strip()
        if query:
            notes = notes.filter(
                Q(title__icontains=query) | Q(content__icontains=query)
            )
        page, headers = paginate(request, notes)
        return Response([_note(n) for n in page], headers=headers)

    @extend_schema(request=NoteSchema, responses={201: NoteSchema})
    def post(self, request: Request) -> Response:
        user = request.user
        if not (can_register_tools(user) or can_audit(user)):
            raise PermissionDenied("Only admins and auditors add notes.")
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            raise ApiValidationError({"detail": 'Send {"title": …, "content": …}.'})
        errors = {}
        for name in ("title", "content"):
            if not isinstance(data.get(name, ""), str):
                errors[name] = f"{name} is text."
        if errors:
            raise ApiValidationError(errors)
        title = data.get("title", "").strip()
        content = data.get("content", "").strip()
        if not title:
            errors["title"] = "A title is required."
        if not content:
            errors["content"] = "Content is required."
        if errors:
            raise ApiValidationError(errors)
        note = Note.objects.create(title=title[:200], content=content, author=user)
        return Response(_note(note), status=status.HTTP_201_CREATED)


def _note(note: Note) -> dict[str, Any]:
    return {
        "id": note.pk,
        "title": note.title,
        "content": note.content,
        "created_at": note.created_at.isoformat(),
    }
