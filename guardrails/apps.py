from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from runs import ports


class GuardrailsConfig(AppConfig):
    name = "guardrails"
    verbose_name = "Guardrails"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from guardrails import services
        from guardrails.models import Guardrail

        ports.guards_for.fill(services.guards_for)
        post_save.connect(services.on_guardrail_changed, sender=Guardrail)
        post_delete.connect(services.on_guardrail_changed, sender=Guardrail)
