"""The addresses of the traces pages that lower apps link to (``runs.ports``)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse


def trace_url(task_id: Any, /) -> str:
    """The path of ``task_id``'s trace page (fills ``runs.ports.trace_url``)."""
    return reverse("trace", args=[task_id])
