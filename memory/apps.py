from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Long-term memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The memory tools register their handlers on import; they use the
        # models, so this waits for ready().
        from memory import builtins  # noqa: F401
        from memory.services import memory_note
        from runs.ports import plug_memory

        # A new run starts with what is remembered for it (runs/ports.py).
        plug_memory(memory_note)
