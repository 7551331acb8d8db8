from __future__ import annotations

from django.urls import path

from approvals.consumers import ApprovalsConsumer
from runs.consumers import TaskConsumer

websocket_urlpatterns = [
    path("ws/tasks/<uuid:task_id>/", TaskConsumer.as_asgi()),
    path("ws/approvals/", ApprovalsConsumer.as_asgi()),
]
