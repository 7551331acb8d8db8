from __future__ import annotations

from django.contrib import admin

from approvals.models import ApprovalRequest
from infra.admin import ReadOnlyAdmin


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = (
        "preview",
        "tool",
        "status",
        "decision",
        "requested_by",
        "requested_at",
        "decided_by",
    )
    list_filter = ("status", "decision", "tool", "risk")
