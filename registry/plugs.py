"""What the registry plugs in: the secret store the redactor reads
(infra.runtime), and the operator's extra tool modules
(``REACH_EXTRA_TOOL_MODULES``), whose handlers register themselves on import."""

from __future__ import annotations

import importlib

from django.conf import settings

from infra.runtime import plug_secret_store
from registry.secrets import secret_values

plug_secret_store(secret_values)
for module in getattr(settings, "REACH_EXTRA_TOOL_MODULES", []):
    importlib.import_module(module)
