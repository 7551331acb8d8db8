from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.core import checks


class AccountsConfig(AppConfig):
    name = "accounts"
    default = True
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, once every model is loaded (as every app's ``ready``).
        from axes.signals import user_locked_out

        from accounts.checks import check_required_roles
        from accounts.services import audit_lockout

        # A lockout begun is recorded in the chain (failures are, by audit).
        user_locked_out.connect(audit_lockout, dispatch_uid="reach-locked-out")
        checks.register(check_required_roles)


class ReachAdminConfig(admin_apps.AdminConfig):
    """The admin, on a site that asks staff for their second factor when
    ``REACH_REQUIRE_2FA`` names admins (accounts/admin_site.py)."""

    default = False
    default_site = "accounts.admin_site.ReachAdminSite"
