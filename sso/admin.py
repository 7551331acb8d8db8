from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from infra.admin import ReadOnlyAdmin
from sso.models import SSOIdentity
from sso.services import sso_identity_unbind


@admin.register(SSOIdentity)
class SSOIdentityAdmin(ReadOnlyAdmin):
    """Who signs in as whom. Deleting one (audited) makes that user's next sign-in
    match by verified e-mail again."""

    list_display = ["user", "email", "issuer", "subject", "last_login_at"]
    list_select_related = ["user"]
    search_fields = ["user__username", "email", "subject"]

    def delete_model(self, request: HttpRequest, obj: SSOIdentity) -> None:
        sso_identity_unbind(identity=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for identity in queryset.select_related("user"):
            sso_identity_unbind(identity=identity, actor=request.user)
