from __future__ import annotations

from django.apps import AppConfig

from runs import ports


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The memory tools register their handlers with the registry on import.
        from memory import builtins  # noqa: F401
        from memory.services import memory_note

        # The note that gives a new run what is remembered for it.
        ports.memory_for.fill(memory_note)
