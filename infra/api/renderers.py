from __future__ import annotations

from typing import Any

from rest_framework.renderers import JSONRenderer


class UnicodeJSONRenderer(JSONRenderer):
    """UTF-8 JSON with non-ASCII characters unescaped."""

    ensure_ascii = False
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: dict[str, Any] | None = None,
    ) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            # A lone surrogate (kept from before bodies were checked, or in a
            # tool's result) has no UTF-8 form: escape it rather than fail.
            escaped = JSONRenderer()
            escaped.ensure_ascii = True
            return escaped.render(data, accepted_media_type, renderer_context)
