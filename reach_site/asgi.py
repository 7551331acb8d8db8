"""ASGI entry point: HTTP through Django (the MCP gateway under ``/mcp/``),
websockets through Channels."""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reach_site.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from gateway.asgi import MCPGateway  # noqa: E402
from reach_site.routing import websocket_urlpatterns  # noqa: E402
from runs.consumers import OriginOrBearerValidator  # noqa: E402

mcp_gateway = MCPGateway()


async def http_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    # The MCP gateway is an ASGI app of the SDK's, not a Django view: it streams
    # its answers and owns its own bearer check (gateway/asgi.py).
    if scope["path"] in ("/mcp", "/mcp/"):
        await mcp_gateway(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        # Our Origin for session sockets; programs offer a bearer token instead.
        "websocket": OriginOrBearerValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
