"""Trace API: export, import, deterministic re-run, fork (the audit log is
``audit.api``'s)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.models import AuditKind
from audit.permissions import can_audit
from audit.services import audit_task
from infra.api.common import error_response
from infra.api.errors import http_status
from infra.api.parsers import BoundedJSONParser
from runs.api.common import visible_task_or_404
from traces.export import trace_document
from traces.fork import task_fork
from traces.imports import TraceInvalid, trace_import
from traces.replay import TaskNotFinal, task_rerun


class TaskTrace(APIView):
    """``GET /api/tasks/{id}/trace/``: the trace document (owner, auditors)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id)
        document = trace_document(task)
        audit_task(
            AuditKind.TRACE_EXPORTED,
            task_id=task.pk,
            actor=request.user,
        )
        return Response(document)


class TaskRerun(APIView):
    """``POST /api/tasks/{id}/rerun/``: re-run deterministically, name divergence."""

    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id)
        try:
            result = task_rerun(task=task)
        except TaskNotFinal as refused:
            return Response(
                {
                    "error": f"The task is still {task.status}; re-run it once it "
                    "has finished.",
                    "task": str(task.pk),
                },
                status=http_status(refused),
            )
        return Response(result.as_dict())


class TaskFork(APIView):
    """``POST /api/tasks/{id}/fork/``: continue live from step N as a new task."""

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id)
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            raise ParseError('Send {"from_seq": N, "arguments": {...}, "model": …}.')
        try:
            fork = task_fork(
                task=task,
                user=request.user,
                from_seq=data.get("from_seq"),  # type: ignore[arg-type]
                arguments=data.get("arguments"),
                model=data.get("model"),
            )
        # A ForkError answers its kind's status (infra.api.errors).
        except ValueError as exc:  # e.g. the goal no longer fits the message limit
            return error_response(str(exc), status.HTTP_400_BAD_REQUEST)
        return Response({"task": str(fork.pk)}, status=status.HTTP_202_ACCEPTED)


class TraceDocumentParser(BoundedJSONParser):
    """JSON, read up to ``REACH_MAX_IMPORT_BYTES`` and refused beyond."""

    limit_setting = "REACH_MAX_IMPORT_BYTES"
    what = "The trace document"


class TraceImport(APIView):
    """``POST /api/traces/import/``: a trace document in, a read-only task out."""

    parser_classes = [TraceDocumentParser]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        if not can_audit(request.user):
            raise PermissionDenied("Only auditors import traces.")
        try:
            task = trace_import(document=request.data, user=request.user)
        except TraceInvalid as exc:
            return Response(
                {"error": "Not an importable trace document.", "errors": exc.errors},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return Response({"task": str(task.pk)}, status=status.HTTP_201_CREATED)
