"""Trace API: export (more in later modules)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api.views import visible_task
from traces.export import trace_document
from traces.services import audit_append


class TaskTrace(APIView):
    def get(self, request: Request, task_id: str) -> Response:
        task = visible_task(request, task_id)
        document = trace_document(task)
        audit_append(
            kind="trace.exported",
            actor=request.user,
            task_id=task.pk,
            object_type="task",
            object_id=task.pk,
        )
        return Response(document)
