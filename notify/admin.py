"""Notify in the admin: targets (where requests are announced) and the delivery
log (every try, its status code and error, the next attempt)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from infra.admin import ReadOnlyAdmin
from notify import webhooks
from notify.models import Delivery, DeliveryAttempt, NotifyEvent, NotifyTarget
from notify.services import (
    delivery_retry,
    target_deleted,
    target_saved,
    target_secret_generate,
)


class NotifyTargetForm(forms.ModelForm):
    class Meta:
        model = NotifyTarget
        fields = (
            "name",
            "kind",
            "enabled",
            "for_all",
            "routes",
            "events",
            "slack_channel",
            "url",
            "allowed_hosts",
            "secret_name",
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        kind = cleaned.get("kind")
        events = cleaned.get("events") or []
        if not isinstance(events, list) or any(
            e not in NotifyEvent.values for e in events
        ):
            self.add_error(
                "events", "A list of: " + ", ".join(NotifyEvent.values) + "."
            )
        hosts = cleaned.get("allowed_hosts") or []
        if not isinstance(hosts, list):
            self.add_error("allowed_hosts", "A list of addresses or networks.")
            hosts = []
        if kind == NotifyTarget.Kind.SLACK_CHANNEL and not cleaned.get("slack_channel"):
            self.add_error("slack_channel", "A Slack channel target needs its channel.")
        if kind == NotifyTarget.Kind.WEBHOOK:
            url = cleaned.get("url") or ""
            problem = (
                webhooks.url_problem(url, hosts) if url else "A webhook needs a URL."
            )
            if problem:
                self.add_error("url", problem)
        return cleaned


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = ("number", "at", "status_code", "duration_ms", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(NotifyTarget)
class NotifyTargetAdmin(admin.ModelAdmin):
    form = NotifyTargetForm
    list_display = ("name", "kind", "enabled", "for_all", "slack_channel", "url")
    list_filter = ("kind", "enabled")
    actions = ["generate_secret"]

    def save_model(
        self, request: HttpRequest, obj: NotifyTarget, form: Any, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        target_saved(target=obj, by=request.user, created=not change)
        if obj.kind == NotifyTarget.Kind.WEBHOOK and not obj.secret_name:
            self._show_new_secret(request, obj)

    def delete_model(self, request: HttpRequest, obj: NotifyTarget) -> None:
        target_deleted(target=obj, by=request.user)

    def delete_queryset(
        self, request: HttpRequest, queryset: QuerySet[NotifyTarget]
    ) -> None:
        for target in queryset:
            target_deleted(target=target, by=request.user)

    @admin.action(description="Generate a new signing secret (shown once)")
    def generate_secret(
        self, request: HttpRequest, queryset: QuerySet[NotifyTarget]
    ) -> None:
        for target in queryset.filter(kind=NotifyTarget.Kind.WEBHOOK):
            self._show_new_secret(request, target)

    def _show_new_secret(self, request: HttpRequest, target: NotifyTarget) -> None:
        value = target_secret_generate(target=target, by=request.user)
        self.message_user(
            request,
            f"The signing secret of {target.name} (stored as {target.secret_name}; "
            f"copy it now, it is not shown again): {value}",
            messages.WARNING,
        )


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "event",
        "target",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "short_error",
    )
    list_filter = ("status", "channel", "event", "target")
    list_select_related = ("target",)
    search_fields = ("approval_id", "url", "key")
    readonly_fields = (
        "id",
        "key",
        "channel",
        "target",
        "event",
        "approval_id",
        "url",
        "allowed_hosts",
        "secret_name",
        "payload",
        "status",
        "attempts",
        "next_attempt_at",
        "claimed_at",
        "last_status_code",
        "last_error",
        "created_at",
        "delivered_at",
    )
    inlines = [AttemptInline]
    actions = ["retry_now"]

    @admin.display(description="last error")
    def short_error(self, obj: Delivery) -> str:
        return obj.last_error[:80]

    @admin.action(description="Send again now (a fresh budget of attempts)")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        for delivery in queryset.exclude(status=Delivery.Status.DELIVERED):
            delivery_retry(delivery=delivery, by=request.user)
