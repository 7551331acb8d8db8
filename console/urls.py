from __future__ import annotations

from django.urls import path

from console import views

urlpatterns = [
    path("", views.console_page, name="console"),
    path("board/", views.console_board_partial, name="console-board"),
    path("cancel/", views.console_cancel, name="console-cancel"),
    path(
        "tasks/<uuid:task_id>/requeue/",
        views.console_requeue,
        name="console-requeue",
    ),
    path("tasks/<uuid:task_id>/retry/", views.console_retry, name="console-retry"),
]
