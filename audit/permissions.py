"""Who may audit: read every task, trace and approval, and the audit log itself
(docs/api.md "Authentication and permissions").

The permission is the auditor role's ``runs.audit_task`` (declared on the task
model, where the migrations have always kept it): a name here, not an import.
"""

from __future__ import annotations

from typing import Any

AUDIT_PERMISSION = "runs.audit_task"


def can_audit(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(AUDIT_PERMISSION))
