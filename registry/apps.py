from __future__ import annotations

import importlib

from django.apps import AppConfig
from django.conf import settings

from infra.runtime import plug_secret_store


class RegistryConfig(AppConfig):
    name = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Wires a port: the secret store reads models, not importable until now.
        from registry.secrets import secret_values

        plug_secret_store(secret_values)
        # REACH_EXTRA_TOOL_MODULES: their handlers register themselves.
        for module in getattr(settings, "REACH_EXTRA_TOOL_MODULES", []):
            importlib.import_module(module)
