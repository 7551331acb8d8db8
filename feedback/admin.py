"""Feedback and labels are read in the admin, written only through the chat and
the review page (audited there)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.services import audit_append
from feedback.models import (
    Feedback,
    FeedbackAuditKind,
    Judge,
    JudgeVerdict,
    ReviewLabel,
)
from infra.admin import ReadOnlyAdmin


@admin.register(Feedback)
class FeedbackAdmin(ReadOnlyAdmin):
    list_display = ("task", "user", "rating", "updated_at")
    list_filter = ("rating",)


@admin.register(ReviewLabel)
class ReviewLabelAdmin(ReadOnlyAdmin):
    list_display = ("task_ref", "agent_name", "verdict", "reviewer", "updated_at")
    list_filter = ("verdict", "agent_name")
    search_fields = ("goal",)


@admin.register(Judge)
class JudgeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "model", "pass_threshold", "sample_rate", "updated_at")
    filter_horizontal = ("agents",)
    fields = ("name", "rubric", "model", "pass_threshold", "agents", "sample_rate")

    def save_related(
        self, request: HttpRequest, form: Any, formsets: Any, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        judge = form.instance
        audit_append(
            kind=FeedbackAuditKind.JUDGE_CHANGED,
            actor=request.user,
            object_type="judge",
            object_id=judge.name,
            data={
                "created": not change,
                "fields": sorted(form.changed_data),
                "agents": sorted(judge.agents.values_list("name", flat=True)),
                "sample_rate": judge.sample_rate,
            },
        )


@admin.register(JudgeVerdict)
class JudgeVerdictAdmin(ReadOnlyAdmin):
    list_display = ("task", "judge", "origin", "score", "passed", "created_at")
    list_filter = ("judge", "origin", "passed")
