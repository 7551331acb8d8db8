from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_out

from infra.push import push, user_group
from runs import ports


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runs import followups

        user_logged_out.connect(_close_sockets, dispatch_uid="reach-close-sockets")
        # A run's end starts the message queued behind it.
        ports.task_finished.connect(
            followups.on_task_finished, dispatch_uid="reach-queued-followup"
        )


def _close_sockets(sender: object, request: object, user: Any, **_: Any) -> None:
    """Sockets close when the session ends."""
    if user is None:
        return
    push(user_group(user.pk), {"type": "session.ended"})
