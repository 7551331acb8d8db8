"""Admin: suites (read their document) and reports (read-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from evals.models import EvalReport, Suite


@admin.register(Suite)
class SuiteAdmin(admin.ModelAdmin):
    list_display = ["name", "source", "description", "updated_at"]
    readonly_fields = ["document", "source", "created_at", "updated_at"]


@admin.register(EvalReport)
class EvalReportAdmin(admin.ModelAdmin):
    list_display = ["suite", "agent", "model", "runs_per_case", "status", "created_at"]
    list_filter = ["status", "suite"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
