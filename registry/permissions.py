"""Who may register tools."""

from __future__ import annotations

from typing import Any


def can_register_tools(user: Any) -> bool:
    return bool(
        user.is_authenticated
        and (user.is_superuser or user.has_perm("registry.add_tool"))
    )
