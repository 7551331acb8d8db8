"""Who may see and do what (docs/api.md "Authentication and permissions")."""

from __future__ import annotations

from typing import Any

AUDIT_PERMISSION = "runs.audit_task"


def can_audit(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(AUDIT_PERMISSION))
