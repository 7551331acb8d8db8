from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.contrib.auth.signals import user_login_failed


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        user_login_failed.connect(
            _audit_failed_login, dispatch_uid="reach-login-failed"
        )


def _audit_failed_login(sender: object, credentials: dict[str, Any], **_: Any) -> None:
    from audit.services import audit_append

    audit_append(
        kind="auth.login_failed",
        actor="anonymous",
        object_type="user",
        object_id=str(credentials.get("username", ""))[:150],
    )
