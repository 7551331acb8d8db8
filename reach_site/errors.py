"""The site's own error pages where Django's would be a dead end."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.template import loader

from infra.api.auth import STALE_PAGE


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: the site's 403 page with what to do, instead of
    Django's bare page (whose inline style the Content-Security-Policy blocks)."""
    page = loader.get_template("403.html")
    return HttpResponse(page.render({"exception": STALE_PAGE}, request), status=403)
