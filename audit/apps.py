from __future__ import annotations

from django.apps import AppConfig
from django.contrib.auth.signals import user_login_failed


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit.services import audit_failed_login

        # A failed login is recorded in the chain.
        user_login_failed.connect(audit_failed_login, dispatch_uid="reach-login-failed")
