"""The review queue (``/review/``): runs to label, a form per run, the export.

Forms post and redirect back (no script); every label goes through the
services, audited. Reviewers hold ``feedback.review_runs`` (or are admins).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from feedback import services
from feedback.models import ReviewLabel
from infra.runtime import redactor
from infra.views import post_only
from runs.models import Task

QUEUE_ITEMS = 50
RECENT_LABELS = 20


def _reviewer_or_404(request: HttpRequest) -> None:
    # Hidden from those who may not use it, as pages of others' objects are.
    if not services.can_review(request.user):
        raise Http404("No such page.")


@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    _reviewer_or_404(request)
    redact = redactor()
    queue: list[dict[str, Any]] = [
        {
            "task": task,
            "reason": reason,
            "goal": redact.text(task.goal),
            "answer": redact.text(task.final_answer or ""),
        }
        for task, reason in services.review_queue(limit=QUEUE_ITEMS)
    ]
    recent = list(services.labels().order_by("-updated_at")[:RECENT_LABELS])
    return render(
        request,
        "feedback/review.html",
        {
            "queue": queue,
            "recent": recent,
            "verdicts": ReviewLabel.Verdict,
            "sample_rate": services.sample_rate(),
        },
    )


@login_required
@post_only("review")
def review_label(request: HttpRequest, task_id: Any) -> HttpResponse:
    _reviewer_or_404(request)
    task = Task.objects.select_related("agent").filter(pk=task_id).first()
    if task is None:
        messages.error(
            request,
            "That run is gone (purged by trace retention): nothing was labelled.",
        )
        return redirect("review")
    try:
        services.label_run(
            reviewer=request.user,
            task=task,
            verdict=request.POST.get("verdict", ""),
            corrected_answer=request.POST.get("corrected_answer", ""),
            notes=request.POST.get("notes", ""),
        )
    except services.FeedbackRefused as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, f"Labelled “{task.goal[:60]}”.")
    return redirect("review")


@login_required
def review_export(request: HttpRequest) -> HttpResponse:
    """Every label as JSON lines (one object per run), audited."""
    _reviewer_or_404(request)
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(
        services.labels_json_lines(actor=request.user),
        content_type="application/x-ndjson; charset=utf-8",
    )
    response["Content-Disposition"] = (
        f'attachment; filename="review-labels-{stamp}.jsonl"'
    )
    return response
