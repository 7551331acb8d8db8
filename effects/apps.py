from __future__ import annotations

from django.apps import AppConfig


class EffectsConfig(AppConfig):
    name = "effects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The built-in handlers register themselves with the registry on import;
        # they use the models, so this waits for ready().
        from effects import builtins  # noqa: F401
        from effects.services import mail_queue
        from runs.ports import MailPort, plug_mail

        # Approvals mails approvers through the outbox via this port (runs/ports.py).
        plug_mail(MailPort(queue=mail_queue))
