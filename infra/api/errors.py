from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from infra.errors import ErrorKind, ServiceError

#: What each kind of service refusal answers over HTTP: the one place it is said.
HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID: status.HTTP_400_BAD_REQUEST,
    ErrorKind.FORBIDDEN: status.HTTP_403_FORBIDDEN,
    ErrorKind.NOT_FOUND: status.HTTP_404_NOT_FOUND,
    ErrorKind.CONFLICT: status.HTTP_409_CONFLICT,
    ErrorKind.TOO_MANY: status.HTTP_429_TOO_MANY_REQUESTS,
}


def http_status(error: ServiceError) -> int:
    """The HTTP status that answers ``error``."""
    return HTTP_STATUS[error.kind]


def _summary(errors: dict[str, Any]) -> str:
    """Field errors as one line: ``name: message; other: message``."""
    parts = []
    for field, messages in errors.items():
        listed = messages if isinstance(messages, list) else [messages]
        parts.append(f"{field}: " + " ".join(str(m) for m in listed))
    return "; ".join(parts)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with a plain ``error`` message beside ``detail``.

    Field errors (``{"name": [...]}``) keep their shape and get ``error`` too, so
    every refusal a client reads carries one message. A service's refusal
    (:class:`~infra.errors.ServiceError`) answers its kind's status with its
    message as ``error`` and ``detail``, beside what else it carries.
    """
    if isinstance(exc, ServiceError):
        body = {"error": exc.message, "detail": exc.message, **exc.extra}
        return Response(body, status=http_status(exc), headers=dict(exc.headers))
    response = drf_handler(exc, context)
    if response is not None and isinstance(response.data, dict):
        detail = response.data.get("detail")
        if "error" in response.data:
            pass
        elif detail is not None:
            response.data["error"] = str(detail)
        elif response.data:
            response.data["error"] = _summary(response.data)
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 page, but JSON in the API's error shape under ``/api/`` (a
    path that matches no route, e.g. a task id that is not a UUID)."""
    if request.path.startswith("/api/"):
        message = "Not found."
        return JsonResponse({"error": message, "detail": message}, status=404)
    return defaults.page_not_found(request, exception)
