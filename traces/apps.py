from __future__ import annotations

from django.apps import AppConfig

from runs import ports
from traces.links import trace_url


class TracesConfig(AppConfig):
    name = "traces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from traces.otel import on_task_finished

        # Finished runs go out over OpenTelemetry.
        ports.task_finished.connect(on_task_finished, dispatch_uid="reach-otel-export")
        # Lower apps' pages link to a task's trace.
        ports.trace_url.fill(trace_url)
