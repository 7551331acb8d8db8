from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Runs park calls and withdraw requests through this port (runs/ports.py).
        # Both modules use the models: they can only be imported once apps are ready.
        from approvals.services import approval_create, approvals_cancel_for_task
        from runs.ports import ApprovalPort, plug_approvals

        plug_approvals(
            ApprovalPort(
                open=approval_create, cancel_for_task=approvals_cancel_for_task
            )
        )
