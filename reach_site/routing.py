from __future__ import annotations

from django.urls import path

from agents.consumers import TaskConsumer
from approvals.consumers import ApprovalsConsumer

websocket_urlpatterns = [
    path("ws/tasks/<uuid:task_id>/", TaskConsumer.as_asgi()),
    path("ws/approvals/", ApprovalsConsumer.as_asgi()),
]
