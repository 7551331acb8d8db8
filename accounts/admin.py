"""Users in the admin, with the sign-in actions: unlock, log out everywhere,
reset two-factor (each audited by its service).

django-otp's own device admins are taken away: a device deleted there would be
a change of security state nobody recorded. An admin resets a user's second
factor with the action instead.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import policy, services

User = get_user_model()

for model in (TOTPDevice, StaticDevice):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class ReachUserAdmin(UserAdmin):
    list_display = (*UserAdmin.list_display, "two_factor")
    actions = ["unlock_login", "log_out_everywhere", "reset_two_factor"]

    @admin.display(boolean=True, description="two-factor")
    def two_factor(self, user: Any) -> bool:
        return policy.has_second_factor(user)

    @admin.action(description="Unlock sign-in (clear failed-login counts)")
    def unlock_login(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        cleared = sum(
            services.login_unlock(by=request.user, username=user.get_username())
            for user in queryset
        )
        self.message_user(
            request,
            f"Unlocked {queryset.count()} account(s); {cleared} had failed logins "
            "counted.",
            messages.SUCCESS,
        )

    @admin.action(description="Log out everywhere (end every session)")
    def log_out_everywhere(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ended = sum(
            services.sessions_end_all(user=user, by=request.user) for user in queryset
        )
        self.message_user(
            request,
            f"Ended {ended} session(s) of {queryset.count()} user(s).",
            messages.SUCCESS,
        )

    @admin.action(description="Reset two-factor (remove authenticator and codes)")
    def reset_two_factor(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for user in queryset:
            services.second_factor_disable(user=user, by=request.user)
        self.message_user(
            request,
            f"Two-factor authentication removed from {queryset.count()} user(s); "
            "they set it up again at their next visit.",
            messages.SUCCESS,
        )
