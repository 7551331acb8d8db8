"""The addresses of the evals pages that lower apps link to (``runs.ports``)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse


def report_url(report_id: Any, /) -> str:
    """The path of a report's page (fills ``runs.ports.eval_report_url``)."""
    return reverse("eval", args=[report_id])
