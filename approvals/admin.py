from __future__ import annotations

from django.contrib import admin

from agents.admin import ReadOnlyAdmin
from approvals.models import ApprovalRequest


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = (
        "preview",
        "tool",
        "status",
        "requested_by",
        "requested_at",
        "decided_by",
    )
    list_filter = ("status", "tool", "risk")
