"""``/schedules/``: a user's own schedules: the next five due times, pause,
resume, run now, and a form to add one (for agents the user may use)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from automations import services
from automations.cadence import CadenceError
from automations.models import Schedule
from infra.views import post_only
from registry.access import usable_agents


def visible_schedules(user: Any) -> QuerySet[Schedule]:
    """The user's own schedules; every one for a manager."""
    rows = Schedule.objects.select_related("owner", "agent", "last_task")
    if user.is_superuser or user.has_perm("automations.manage_all_schedules"):
        return rows
    return rows.filter(owner=user)


class ScheduleCreateForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = [
            "name",
            "agent",
            "message",
            "cron",
            "interval_s",
            "time_zone",
            "missed",
            "webhook_url",
        ]
        widgets = {"message": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = usable_agents(user).order_by("name")
        self.instance.owner = user

    def clean_webhook_url(self) -> str:
        try:
            return services.webhook_url_checked(self.cleaned_data.get("webhook_url"))
        except services.WebhookUrlInvalid as exc:
            raise forms.ValidationError(exc.message) from exc


@dataclass
class Row:
    schedule: Schedule
    #: The next five due times, written in the schedule's own time zone.
    upcoming: list[str]


@login_required
def schedule_list(request: HttpRequest) -> HttpResponse:
    form = ScheduleCreateForm(user=request.user)
    if request.method == "POST":
        form = ScheduleCreateForm(request.POST, user=request.user)
        if form.is_valid():
            try:
                services.schedule_save(schedule=form.instance, user=request.user)
            except CadenceError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Schedule {form.instance.name} saved.")
                return redirect("schedules")
    now = timezone.now()
    rows = []
    for schedule in visible_schedules(request.user).order_by("name"):
        upcoming: list[datetime] = []
        cadence = schedule.cadence()
        try:
            if not schedule.paused:
                upcoming = cadence.upcoming(now, 5)
            zone = cadence.zone()
        except CadenceError:
            upcoming, zone = [], None
        shown = [at.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z") for at in upcoming]
        rows.append(Row(schedule, shown))
    return render(request, "automations/schedules.html", {"rows": rows, "form": form})


@login_required
@post_only("schedules")
def schedule_act(request: HttpRequest, schedule_id: Any, action: str) -> HttpResponse:
    schedule = visible_schedules(request.user).filter(pk=schedule_id).first()
    if schedule is None:
        raise Http404("No such schedule.")
    if action == "pause":
        services.schedule_pause(
            schedule=schedule, user=request.user, reason="paused by a person"
        )
        messages.success(request, f"{schedule.name}: paused.")
    elif action == "resume":
        services.schedule_resume(schedule=schedule, user=request.user)
        messages.success(request, f"{schedule.name}: resumed.")
    elif action == "run":
        try:
            task = services.schedule_run_now(schedule=schedule, user=request.user)
        except services.ScheduleRefused as refused:
            messages.error(request, f"{schedule.name}: {refused.message}")
        else:
            messages.success(request, f"{schedule.name}: started run {task.pk}.")
    else:
        raise Http404("No such action.")
    return redirect("schedules")
