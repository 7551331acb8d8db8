"""Memory items written the way a person or a run writes them (tests/memory)."""

from __future__ import annotations

from typing import Any

from memory.models import MemoryItem
from memory.services import Source, memory_write


def remembered(user: Any, text: str, subject: str = "", **options: Any) -> MemoryItem:
    """A fact ``user`` wrote by hand about themselves."""
    return memory_write(
        scope=MemoryItem.Scope.USER,
        user=user,
        subject=subject,
        text=text,
        source=Source.person(user),
        **options,
    )


def memory_note_of(task: Any) -> Any:
    """The memory note a run started with (its first step), or None."""
    step = task.steps.filter(seq=1, kind="note").first()
    if step is None or step.detail.get("reason") != "memory":
        return None
    return step
