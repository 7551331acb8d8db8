"""Notify in the admin: targets (where requests are announced) and the delivery
log (every try, its status code and error, the next attempt)."""

from __future__ import annotations

import os
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from infra.admin import ReadOnlyAdmin
from notify import completion, webhooks
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

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "completion-secret/",
                self.admin_site.admin_view(self.completion_secret_view),
                name="notify_completion_secret",
            ),
            *super().get_urls(),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"may_see_completion_secret": _may_see_completion_secret(request)}
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def completion_secret_view(self, request: HttpRequest) -> HttpResponse:
        """The install's completion webhook secret (generated on first sight),
        and a POST that replaces it; for those who configure webhooks."""
        if not _may_see_completion_secret(request):
            raise PermissionDenied
        from_environment = bool(
            os.environ.get(f"REACH_SECRET_{completion.SECRET_NAME}")
        )
        if request.method == "POST" and not from_environment:
            completion.completion_secret_rotate(by=request.user)
            self.message_user(
                request,
                "A new completion webhook secret signs every delivery from now "
                "on: give it to your receivers.",
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:notify_completion_secret"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Completion webhook secret",
            "secret_name": completion.SECRET_NAME,
            "secret": completion.completion_secret(by=request.user),
            "from_environment": from_environment,
        }
        return TemplateResponse(
            request, "admin/notify/delivery/completion_secret.html", context
        )

    @admin.action(description="Send again now (a fresh budget of attempts)")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        for delivery in queryset.exclude(status=Delivery.Status.DELIVERED):
            delivery_retry(delivery=delivery, by=request.user)


def _may_see_completion_secret(request: HttpRequest) -> bool:
    """Whoever may configure webhook targets may read the secret receivers check."""
    return bool(request.user.has_perm("notify.change_notifytarget"))
