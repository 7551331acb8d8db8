from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with a plain ``error`` message beside ``detail``."""
    response = drf_handler(exc, context)
    if response is not None and isinstance(response.data, dict):
        detail = response.data.get("detail")
        if detail is not None and "error" not in response.data:
            response.data["error"] = str(detail)
    return response
