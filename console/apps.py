"""The console: operators watch the runs, the workers and the queue, and act."""

from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Run console"
    default_auto_field = "django.db.models.BigAutoField"
