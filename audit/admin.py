from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditEvent
from infra.admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("position", "kind", "actor", "object_type", "object_id", "at")
    list_filter = ("kind",)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
