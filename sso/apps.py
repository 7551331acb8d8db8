"""Single sign-on through an OpenID Connect provider (mozilla-django-oidc)."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks

from sso.checks import check_settings


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_settings, checks.Tags.security)
