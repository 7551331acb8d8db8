from __future__ import annotations

from django.apps import AppConfig


class FeedbackConfig(AppConfig):
    name = "feedback"
    verbose_name = "Feedback and review"
    default_auto_field = "django.db.models.BigAutoField"
