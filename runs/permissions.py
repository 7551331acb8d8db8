"""Who may see and do what (API.md "Authentication and permissions")."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from runs.models import Task

AUDIT_PERMISSION = "runs.audit_task"


def can_audit(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(AUDIT_PERMISSION))


def visible_tasks(user: Any) -> QuerySet[Task]:
    """Tasks the user may read: their own, or all of them for auditors."""
    if can_audit(user):
        return Task.objects.all()
    return Task.objects.filter(owner=user)
