from __future__ import annotations

from django.urls import path

from automations import views

urlpatterns = [
    path("", views.schedule_list, name="schedules"),
    path("<uuid:schedule_id>/<str:action>/", views.schedule_act, name="schedule-act"),
]
