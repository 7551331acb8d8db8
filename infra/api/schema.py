"""The OpenAPI schema's shared parts, for drf-spectacular: the refusals every
operation may answer (:class:`ReachAutoSchema`, ``DEFAULT_SCHEMA_CLASS``), their
body (:class:`ErrorSchema`) and the session cookie's scheme. Each app documents
its own shapes beside its views."""

from __future__ import annotations

from typing import Any

from drf_spectacular.authentication import SessionScheme
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class SessionCookieScheme(SessionScheme):
    """The session cookie, as for DRF's SessionAuthentication (ours subclasses it)."""

    target_class = "infra.api.auth.SessionAuthentication"


class ErrorSchema(serializers.Serializer):
    """Every refusal: ``error`` is the message; field errors add a key per field."""

    error = serializers.CharField()
    detail = serializers.JSONField(
        required=False, help_text="DRF's detail: the message, or field errors"
    )


#: The refusals any operation may answer, whatever it does: the parser's, the
#: authentication's, the permissions' and the throttle's.
REFUSALS = {
    "400": "Malformed: not JSON, nested too deeply, text that cannot be stored, "
    "or field errors (one key per field, beside error)",
    "401": "No valid credentials (a bearer token or a session)",
    "403": "The caller's role may not do this (or the CSRF check failed)",
    "429": "Too many requests: the API throttle",
}
#: Only where the path names an object.
NOT_FOUND = {"404": "No such object, or one the caller may not see"}
#: Only where the operation takes a body.
TOO_LARGE = {"413": "The body is larger than the limit"}


class ReachAutoSchema(AutoSchema):
    """drf-spectacular's schema with the refusals every operation may answer
    documented beside its own responses (which win when they name the same
    status)."""

    def _get_response_bodies(self, direction: Any = "response") -> Any:
        responses = super()._get_response_bodies(direction)
        refusals = dict(REFUSALS)
        if "{" in self.path:
            refusals |= NOT_FOUND
        if self.method in ("POST", "PUT", "PATCH"):
            refusals |= TOO_LARGE
        for code, description in refusals.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ErrorSchema, description=description),
                    code,
                    direction=direction,
                )
        return responses
