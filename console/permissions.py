"""Who may watch the console and who may act from it."""

from __future__ import annotations

from typing import Any

VIEW_PERMISSION = "console.view_console"
OPERATE_PERMISSION = "console.operate_console"


def can_view_console(user: Any) -> bool:
    return bool(
        user.is_authenticated
        and (user.has_perm(VIEW_PERMISSION) or user.has_perm(OPERATE_PERMISSION))
    )


def can_operate_console(user: Any) -> bool:
    """Cancel, re-queue and retry any user's run (an operator's power over
    others' runs, so a permission of its own beside watching)."""
    return bool(user.is_authenticated and user.has_perm(OPERATE_PERMISSION))
