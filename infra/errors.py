"""The services' refusals: one hierarchy, each saying what kind of refusal it is.

A service raises a :class:`ServiceError` (or its app's subclass) with a
:class:`ErrorKind`, never an HTTP status: what a kind answers over HTTP is
decided once, in the API's exception handler (:mod:`infra.api.errors`), and a
page shows the message where it catches the refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar


class ErrorKind(StrEnum):
    """What kind of refusal: what the caller can do about it."""

    #: The request itself is wrong (a bad argument, a missing field).
    INVALID = "invalid"
    #: The caller may not do this.
    FORBIDDEN = "forbidden"
    #: What the request names does not exist.
    NOT_FOUND = "not_found"
    #: The state of what it acts on refuses it now (already decided, still running).
    CONFLICT = "conflict"
    #: The caller has used up what it may (a daily budget).
    TOO_MANY = "too_many"


class ServiceError(Exception):
    """A refusal a service explained: ``message`` for people, ``kind`` for callers.

    A subclass sets its usual ``kind`` (``default_kind``); a raise may name
    another. ``extra`` holds what an answer carries beside the message, and
    ``headers`` what it sends with it (both empty unless a subclass fills them).
    """

    default_kind: ClassVar[ErrorKind] = ErrorKind.INVALID

    def __init__(self, message: str = "", kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind or self.default_kind

    @property
    def extra(self) -> Mapping[str, Any]:
        return {}

    @property
    def headers(self) -> Mapping[str, str]:
        return {}
