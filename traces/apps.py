from __future__ import annotations

from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Finished runs go out over OpenTelemetry through this port
        # (runs/ports.py): runs sits below traces and may not import it. The
        # module uses the models, so it can only be imported once apps are ready.
        from runs.ports import plug_task_finished
        from traces.otel import on_task_finished

        plug_task_finished(on_task_finished)
