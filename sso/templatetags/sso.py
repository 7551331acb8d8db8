"""``{% sso_login_button %}``: the login page's "Sign in with <provider>"."""

from __future__ import annotations

from typing import Any

from django import template

from sso.config import enabled, provider_name

register = template.Library()


@register.inclusion_tag("sso/_login_button.html", takes_context=True)
def sso_login_button(context: template.Context) -> dict[str, Any]:
    """Nothing unless single sign-on is configured (a settings flag, no request)."""
    return {
        "sso_enabled": enabled(),
        "sso_provider_name": provider_name(),
        "next": context.get("next") or "/",
    }
