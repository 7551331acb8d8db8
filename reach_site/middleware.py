"""A strict Content-Security-Policy: no inline script, no third-party origins."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.template import Engine

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
DOCS_PATH = "/api/docs/"
#: drf-spectacular's Swagger UI page (reach_site/urls.py serves its split view).
DOCS_TEMPLATE = "drf_spectacular/swagger_ui.html"


@functools.cache
def docs_policy() -> str:
    """:data:`POLICY` for the API docs: the same, plus the hash of the page's one
    inline ``<style>`` block.

    Swagger UI's assets come from the sidecar package (static, 'self') and its
    start-up script is a separate request, so only that fixed block of the
    template's own CSS is inline. Its hash is taken from the template itself, so
    an upgrade of drf-spectacular that changes the block keeps working.
    """
    source = Engine.get_default().get_template(DOCS_TEMPLATE).source
    hashes = [
        "'sha256-"
        + base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
        + "'"
        for block in re.findall(r"<style>(.*?)</style>", source, re.S)
    ]
    return POLICY.replace("style-src 'self'", " ".join(["style-src 'self'", *hashes]))


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path == DOCS_PATH:
            response.setdefault("Content-Security-Policy", docs_policy())
        else:
            response.setdefault("Content-Security-Policy", POLICY)
        return response
