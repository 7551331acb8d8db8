"""The audit log's API: ``/api/audit/``, the chain as JSON lines (auditors)."""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ParseError, PermissionDenied
from rest_framework.request import Request
from rest_framework.views import APIView

from audit.permissions import can_audit
from audit.services import audit_json_lines


class AuditLog(APIView):
    """``GET /api/audit/?after=POSITION&limit=N``: the log as JSON lines (auditors).

    Oldest first, so a collector can resume after the last position it stored.
    """

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # JSON lines whatever the client accepts (the log is one format).
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(responses={(200, "application/x-ndjson"): OpenApiTypes.STR})
    def get(self, request: Request) -> StreamingHttpResponse:
        if not can_audit(request.user):
            raise PermissionDenied("Only auditors read the audit log.")
        try:
            after = int(request.query_params.get("after", 0))
            limit_raw = request.query_params.get("limit")
            limit = int(limit_raw) if limit_raw else None
        except ValueError as exc:
            raise ParseError("after and limit are integers.") from exc
        if limit is not None and limit < 1:
            raise ParseError("limit is at least 1.")
        response = StreamingHttpResponse(
            audit_json_lines(after=after, limit=limit),
            content_type="application/x-ndjson; charset=utf-8",
        )
        response["Content-Disposition"] = 'inline; filename="audit.jsonl"'
        return response
