"""The addresses of the evals pages that lower apps link to (``runs.ports``)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse


def report_url(report_id: Any, /) -> str:
    """The path of a report's page (fills ``runs.ports.eval_report_url``)."""
    return reverse("eval", args=[report_id])


def from_run_url(task_id: Any, /) -> str:
    """The path of the page that adds a run to a suite (fills
    ``runs.ports.add_to_suite_url``)."""
    return reverse("eval-from-run", args=[task_id])
