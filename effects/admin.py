"""Admin views of effects: notes and tickets; the ledger and outbox read-only."""

from __future__ import annotations

from django.contrib import admin

from effects.models import Note, Outbox, Ticket, ToolExecution
from infra.admin import ReadOnlyAdmin


@admin.register(Note)
class NoteAdmin(admin.ModelAdmin):
    list_display = ("title", "author", "created_at")
    search_fields = ("title", "content")


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ("title", "task", "created_at")
    readonly_fields = ("idempotency_key", "task", "created_at")


@admin.register(ToolExecution)
class ToolExecutionAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "tool", "status", "created_at")


@admin.register(Outbox)
class OutboxAdmin(ReadOnlyAdmin):
    list_display = ("to", "subject", "status", "message_id", "created_at", "sent_at")
