"""What memory plugs in: its tools (they register their handlers on import) and
the note that gives a new run what is remembered for it (runs/ports.py)."""

from __future__ import annotations

from memory import builtins  # noqa: F401
from memory.services import memory_note
from runs.ports import plug_memory

plug_memory(memory_note)
