"""What every JSON API view shares: pages with a Link header, redaction and
errors (404 for what belongs to someone else is each app's: ``runs.api.common``
for tasks and conversations)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from infra.runtime import redactor

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def page_window(request: Request) -> tuple[int, int]:
    """``?limit=`` (1 to ``MAX_LIMIT``, default ``DEFAULT_LIMIT``) and ``?offset=``."""
    try:
        limit = int(request.query_params.get("limit", DEFAULT_LIMIT))
        offset = int(request.query_params.get("offset", 0))
    except ValueError as exc:
        raise ApiValidationError({"limit": ["limit and offset are integers."]}) from exc
    return max(1, min(limit, MAX_LIMIT)), max(0, offset)


def paginate(
    request: Request, items: QuerySet[Any] | list[Any]
) -> tuple[list[Any], dict[str, str]]:
    """Apply ``?limit=`` and ``?offset=``; return the page and a Link header."""
    limit, offset = page_window(request)
    page = list(items[offset : offset + limit + 1])
    headers = {}
    if len(page) > limit:
        page = page[:limit]
        params = request.query_params.copy()
        params["limit"] = str(limit)
        params["offset"] = str(offset + limit)
        url = request.build_absolute_uri(request.path) + "?" + urlencode(params)
        headers["Link"] = f'<{url}>; rel="next"'
    return page, headers


def redacted(data: Any) -> Any:
    """``data`` with secrets masked: every payload passes here on its way out."""
    return redactor().data(data)


def error_response(message: str, status: int) -> Response:
    """A refusal a service explained: ``error`` and ``detail`` carry its message."""
    return Response({"error": message, "detail": message}, status=status)
