"""What the gateway plugs into a run: the worker builds every run's engine, and
a gateway run gets the one-call model instead of the configured endpoint
(runs/ports.py)."""

from __future__ import annotations

from gateway.model_client import gateway_model
from runs.ports import plug_model

plug_model(gateway_model)
