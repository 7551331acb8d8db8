"""Who may do what with memory (docs/api.md "Long-term memory")."""

from __future__ import annotations

from typing import Any

from memory.models import MemoryItem

AGENT_MEMORY_PERMISSION = "memory.manage_agent_memory"


def can_manage_agent_memory(user: Any) -> bool:
    """Admins (and holders of the permission) write what an agent remembers."""
    return bool(
        user.is_authenticated
        and (user.is_superuser or user.has_perm(AGENT_MEMORY_PERMISSION))
    )


def can_change(user: Any, item: MemoryItem) -> bool:
    """A user changes their own items; agent items need the permission."""
    if item.scope == MemoryItem.Scope.USER:
        return bool(user.is_authenticated and item.user_id == user.pk)
    return can_manage_agent_memory(user)
