"""Who may see and do what (API.md "Authentication and permissions")."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from agents.models import Task

AUDIT_PERMISSION = "agents.audit_task"


def can_audit(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(AUDIT_PERMISSION))


def can_register_tools(user: Any) -> bool:
    return bool(
        user.is_authenticated
        and (user.is_superuser or user.has_perm("agents.add_tool"))
    )


def visible_tasks(user: Any) -> QuerySet[Task]:
    """Tasks the user may read: their own, or all of them for auditors."""
    if can_audit(user):
        return Task.objects.all()
    return Task.objects.filter(owner=user)
