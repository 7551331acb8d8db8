"""What traces plugs into a run: finished runs go out over OpenTelemetry
(runs/ports.py; runs sits below traces and may not import it)."""

from __future__ import annotations

from runs.ports import plug_task_finished
from traces.otel import on_task_finished

plug_task_finished(on_task_finished)
