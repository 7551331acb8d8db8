from __future__ import annotations

import importlib

from django.apps import AppConfig
from django.conf import settings

from infra import runtime


class RegistryConfig(AppConfig):
    name = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from registry import versions
        from registry.secrets import secret_values

        # The secret store the redactor reads.
        runtime.secret_store.fill(secret_values)
        # Every save of an agent is a version (registry.versions).
        versions.connect()
        # The operator's extra tool modules, whose handlers register themselves
        # on import.
        for module in getattr(settings, "REACH_EXTRA_TOOL_MODULES", []):
            importlib.import_module(module)
