"""JSON request bodies, bounded: size, nesting depth and text every database keeps.

Every API door (messages, decisions, tool registration, trace import, forks)
reads its body through :class:`BoundedJSONParser`, so an oversized or malformed
body is a 4xx in the API's error shape (``error`` and ``detail``) before any
view or service sees it, never a 500 halfway through a write.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

from engine.json_input import MAX_JSON_DEPTH, json_problem, loads_strict

__all__ = ["MAX_JSON_DEPTH", "BodyInvalid", "BodyTooLarge", "BoundedJSONParser"]


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class BodyInvalid(ParseError):
    """A body that decodes as JSON but may not be taken in.

    When the problem sits under a top-level key of an object body, the key is
    named as a field error too, as the API's validation errors are.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        detail: dict[str, Any] = {"detail": message}
        if field is not None and field not in ("detail", "error"):
            detail[field] = [message]
        super().__init__(detail)


def load_json(raw: bytes, *, what: str = "The body") -> Any:
    """Decode ``raw`` as a UTF-8 JSON body that every database can store.

    Raises ParseError (400) for anything else.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"{what} is not UTF-8 text: {exc}") from exc
    try:
        value = loads_strict(text)
    except ValueError as exc:
        raise ParseError(f"{what} is not valid JSON: {exc}") from exc
    found = json_problem(value)
    if found is not None:
        raise BodyInvalid(*found)
    return value


def read_bounded(
    stream: Any, request: Any, *, limit: int | None, setting: str, what: str
) -> bytes:
    """The body's bytes, refused with 413 beyond ``limit`` (None: unbounded),
    the value of ``setting``."""
    too_large = f"{what} is larger than {limit} bytes ({setting})."
    if limit is not None:
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        try:
            if declared and int(declared) > limit:
                raise BodyTooLarge(too_large)
        except ValueError:
            pass
    if stream is None:
        return b""
    raw: bytes = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise BodyTooLarge(too_large)
    return raw


class BoundedJSONParser(BaseParser):
    """DRF's JSON parser, bounded: at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes
    (Django's own limit for request bodies), nested at most ``MAX_JSON_DEPTH``
    levels, and only text every supported database stores."""

    media_type = "application/json"
    #: The setting that bounds the body's size, in bytes.
    limit_setting = "DATA_UPLOAD_MAX_MEMORY_SIZE"
    what = "The request body"

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        request = (parser_context or {}).get("request")
        limit = getattr(settings, self.limit_setting, None)
        raw = read_bounded(
            stream, request, limit=limit, setting=self.limit_setting, what=self.what
        )
        return load_json(raw, what=self.what)
