from __future__ import annotations

from django.contrib import admin

from approvals.models import ApprovalLinkUse, ApprovalRequest
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


@admin.register(ApprovalLinkUse)
class ApprovalLinkUseAdmin(ReadOnlyAdmin):
    """Which mailed decision links were used, by whom and when (the tokens
    themselves are never stored)."""

    list_display = ("approval", "user", "decision", "used_at")
    list_filter = ("decision",)
