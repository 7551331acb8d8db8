from django.apps import AppConfig

from gateway.model_client import gateway_model
from runs import ports


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "MCP gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The worker builds every run's engine: a gateway run gets the one-call
        # model instead of the configured endpoint.
        ports.model_for.fill(gateway_model)
