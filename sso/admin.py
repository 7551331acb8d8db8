from __future__ import annotations

from django.contrib import admin

from infra.admin import ReadOnlyAdmin
from sso.models import SSOIdentity


@admin.register(SSOIdentity)
class SSOIdentityAdmin(ReadOnlyAdmin):
    """Who signs in as whom; deleting one makes the next sign-in match by e-mail."""

    list_display = ["user", "email", "issuer", "subject", "last_login_at"]
    list_select_related = ["user"]
    search_fields = ["user__username", "email", "subject"]
