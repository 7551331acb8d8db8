"""Admin: schedules and triggers, each user's own (managers see everyone's).

A user with the model permissions (``automations.add_schedule``…) and staff
access sees and changes only what they own, runs only agents they may use, and
cannot make a schedule run as someone else; ``automations.manage_all_schedules``
(or a superuser) lifts that.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from automations import services
from automations.cadence import CadenceError
from automations.models import Schedule, Trigger
from registry.access import usable_agents


def _manages_all(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_superuser or user.has_perm("automations.manage_all_schedules"))


class _OwnedAdmin(admin.ModelAdmin):
    """Each user's own rows, agents they may use, themselves as the owner."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request).select_related("owner", "agent")
        return rows if _manages_all(request) else rows.filter(owner=request.user)

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if not _manages_all(request):
            if db_field.name == "owner":
                kwargs["queryset"] = get_user_model().objects.filter(pk=request.user.pk)
                kwargs["initial"] = request.user.pk
            elif db_field.name == "agent":
                kwargs["queryset"] = usable_agents(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _mine(self, request: HttpRequest, obj: Any) -> bool:
        return obj is None or _manages_all(request) or obj.owner_id == request.user.pk

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._mine(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and self._mine(request, obj)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) and self._mine(request, obj)


class _WebhookUrlForm(forms.ModelForm):
    """A schedule's or trigger's form: its completion webhook URL held to the
    HTTP tools' rule (``automations.services.webhook_url_checked``)."""

    def clean_webhook_url(self) -> str:
        try:
            return services.webhook_url_checked(self.cleaned_data.get("webhook_url"))
        except services.WebhookUrlInvalid as exc:
            raise forms.ValidationError(exc.message) from exc


class ScheduleForm(_WebhookUrlForm):
    class Meta:
        model = Schedule
        fields = [
            "name",
            "owner",
            "agent",
            "message",
            "cron",
            "interval_s",
            "time_zone",
            "missed",
            "paused",
            "webhook_url",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        candidate = Schedule(
            cron=data.get("cron") or "",
            interval_s=data.get("interval_s"),
            time_zone=data.get("time_zone") or "UTC",
            message=data.get("message") or "",
            created_at=self.instance.created_at or timezone.now(),
        )
        try:
            services.schedule_check(candidate)
        except CadenceError as exc:
            field = (
                "interval_s" if candidate.interval_s and not candidate.cron else "cron"
            )
            if "time zone" in str(exc):
                field = "time_zone"
            elif "message" in str(exc):
                field = "message"
            self.add_error(field, str(exc))
        return data


@admin.register(Schedule)
class ScheduleAdmin(_OwnedAdmin):
    form = ScheduleForm
    list_display = [
        "name",
        "owner",
        "agent",
        "cadence_text",
        "next_due_at",
        "paused",
        "paused_reason",
        "last_fired_at",
    ]
    list_filter = ["paused", "agent", "missed"]
    search_fields = ["name", "message"]
    readonly_fields = [
        "upcoming",
        "runs",
        "paused_reason",
        "next_due_at",
        "last_fired_at",
        "last_task",
        "last_error",
    ]
    actions = ["pause", "resume", "run_now"]

    @admin.display(description="next five due times")
    def upcoming(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "—"
        if obj.paused:
            return "paused: resume to schedule runs"
        zone = obj.cadence().zone()
        times = obj.cadence().upcoming(timezone.now(), 5)
        return format_html(
            "<ol data-testid='upcoming'>{}</ol>",
            format_html_join(
                "",
                "<li>{}</li>",
                ((t.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"),) for t in times),
            ),
        )

    @admin.display(description="its runs")
    def runs(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "—"
        return format_html(
            '<a href="{}?source={}">traces of its runs</a>',
            reverse("traces"),
            obj.source,
        )

    def save_model(
        self, request: HttpRequest, obj: Schedule, form: Any, change: bool
    ) -> None:
        if not _manages_all(request):
            obj.owner = request.user
        services.schedule_save(schedule=obj, user=request.user)

    @admin.action(description="Pause the selected schedules")
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            services.schedule_pause(
                schedule=schedule, user=request.user, reason="paused by a person"
            )
        self.message_user(request, f"Paused {len(queryset)}.")

    @admin.action(description="Resume the selected schedules")
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            services.schedule_resume(schedule=schedule, user=request.user)
        self.message_user(request, f"Resumed {len(queryset)}.")

    @admin.action(description="Run the selected schedules now")
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            try:
                task = services.schedule_run_now(schedule=schedule, user=request.user)
            except services.ScheduleRefused as refused:
                self.message_user(
                    request, f"{schedule.name}: {refused.message}", messages.ERROR
                )
                continue
            self.message_user(request, f"{schedule.name}: started run {task.pk}.")


class TriggerForm(_WebhookUrlForm):
    class Meta:
        model = Trigger
        fields = [
            "name",
            "owner",
            "agent",
            "template",
            "rate_per_min",
            "enabled",
            "webhook_url",
        ]

    def clean_template(self) -> str:
        template = self.cleaned_data["template"]
        try:
            services.template_fields(template)
        except services.TemplateError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return template


@admin.register(Trigger)
class TriggerAdmin(_OwnedAdmin):
    form = TriggerForm
    list_display = [
        "name",
        "owner",
        "agent",
        "enabled",
        "rate_per_min",
        "last_fired_at",
    ]
    list_filter = ["enabled", "agent"]
    readonly_fields = ["endpoint", "last_fired_at", "created_at"]

    @admin.display(description="endpoint")
    def endpoint(self, obj: Trigger) -> str:
        if obj.pk is None:
            return "— (the secret is shown once, when you save)"
        return f"POST /api/triggers/{obj.pk}/"

    def save_model(
        self, request: HttpRequest, obj: Trigger, form: Any, change: bool
    ) -> None:
        if not _manages_all(request):
            obj.owner = request.user
        secret = services.trigger_save(trigger=obj, user=request.user)
        if secret is not None:
            self.message_user(
                request,
                f"Trigger {obj.name}: POST /api/triggers/{obj.pk}/ signed with the "
                f"secret {secret} (shown this once; keep it now). Sign as "
                "X-Reach-Signature: t=<unix>,v1=HMAC-SHA256(secret, '<t>.' + body).",
                messages.WARNING,
            )
