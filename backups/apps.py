"""Backups: ``manage.py backup`` and ``manage.py restore`` (no models of its own)."""

from __future__ import annotations

from django.apps import AppConfig


class BackupsConfig(AppConfig):
    name = "backups"
    verbose_name = "Backups"
    default_auto_field = "django.db.models.BigAutoField"
