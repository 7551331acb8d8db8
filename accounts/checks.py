"""System checks of the sign-in settings (``manage.py check``, every start)."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from accounts.policy import required_roles


def check_required_roles(
    app_configs: Any = None, **_: Any
) -> list[checks.CheckMessage]:
    try:
        required_roles()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="accounts.E001")]
    return []
