from __future__ import annotations

from django.apps import AppConfig

from infra import mail


class EffectsConfig(AppConfig):
    name = "effects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The built-in tools register their handlers with the registry on import.
        from effects import builtins  # noqa: F401
        from effects.services import queue_email

        # The outbox that approvals mails approvers through.
        mail.outbox.fill(queue_email)
