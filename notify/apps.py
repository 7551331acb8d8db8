from __future__ import annotations

from django.apps import AppConfig

from runs import ports


class NotifyConfig(AppConfig):
    name = "notify"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, once every model is loaded (as every app's ``ready``).
        from approvals.events import approval_changed
        from notify import completion
        from notify.services import on_approval_changed

        # Every change of a request may announce something (Slack, webhooks).
        approval_changed.connect(on_approval_changed, dispatch_uid="notify")
        # A run that ends or parks posts its outcome to its webhook URL, if any.
        ports.task_outcome.connect(
            completion.on_task_outcome, dispatch_uid="notify-completion"
        )
