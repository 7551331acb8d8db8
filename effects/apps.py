from __future__ import annotations

from django.apps import AppConfig


class EffectsConfig(AppConfig):
    name = "effects"
    default_auto_field = "django.db.models.BigAutoField"
