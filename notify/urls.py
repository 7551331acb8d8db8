from __future__ import annotations

from django.urls import path

from notify import views

urlpatterns = [
    path(
        "slack/interactions/",
        views.SlackInteractions.as_view(),
        name="slack-interactions",
    ),
]
