"""Feedback and labels are read in the admin, written only through the chat and
the review page (audited there)."""

from __future__ import annotations

from django.contrib import admin

from feedback.models import Feedback, ReviewLabel
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
