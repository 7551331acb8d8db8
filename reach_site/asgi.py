"""ASGI entry point: HTTP through Django (the MCP gateway under ``/mcp/``),
websockets through Channels."""

from __future__ import annotations

import os
from typing import Any

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reach_site.settings")
django.setup(set_prefix=False)


class OneHopASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain and the view run as one
    synchronous call, in one hop to the thread that runs sync code.

    Every view and middleware here is synchronous. Django's own handler runs the
    chain in async mode: each ``MiddlewareMixin`` then hands its
    ``process_request`` and ``process_response`` to that thread and back, one
    plain sync middleware (ours) hands the rest of the chain back to the event
    loop, and the view goes to the thread once more: 16 thread hops for a page
    (tests/reach_site/test_asgi.py counts them), which ``make bench-profile``
    found under half the web process's CPU.
    The request still comes in and its response still goes out on the event loop
    (a streaming response's async iterator too), as in Django's handler.
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(
            self.get_response, thread_sensitive=True
        )(request)
        return response


django_asgi_app = OneHopASGIHandler()

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
