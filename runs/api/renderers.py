from __future__ import annotations

from rest_framework.renderers import JSONRenderer


class UnicodeJSONRenderer(JSONRenderer):
    """UTF-8 JSON with non-ASCII characters unescaped."""

    ensure_ascii = False
    charset = "utf-8"
