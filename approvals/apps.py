from __future__ import annotations

from django.apps import AppConfig

from runs import ports


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, once every model is loaded (as every app's ``ready``).
        from approvals.services import approval_create, approvals_cancel_for_task

        # A parked call opens its approval request, a cancelled run withdraws its
        # pending ones.
        ports.approvals.fill(
            ports.ApprovalPort(
                open=approval_create, cancel_for_task=approvals_cancel_for_task
            )
        )
