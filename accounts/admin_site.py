"""The admin site: staff pass their second factor before it opens.

Logging in to the admin is the product's login (``/accounts/login/``), which asks
for the second factor of a user who has one. When ``REACH_REQUIRE_2FA`` names
``admins``, a staff user without a confirmed authenticator is sent to set one up
first, and a session that has not passed the second factor to enter a code.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode

from accounts import policy


class ReachAdminSite(admin.AdminSite):
    def has_permission(self, request: HttpRequest) -> bool:
        return super().has_permission(request) and not policy.refusal(
            request.user, role=policy.Role.ADMINS
        )

    def login(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """Where the admin sends whoever it does not let in."""
        target = request.GET.get("next") or ""
        if not url_has_allowed_host_and_scheme(
            target,
            allowed_hosts={request.get_host()},
            require_https=request.is_secure(),
        ):
            target = reverse("admin:index")
        user = request.user
        if self.has_permission(request):
            return redirect(target)
        if not user.is_authenticated:
            return redirect_to_login(target, reverse("login"))
        if not (user.is_active and user.is_staff):
            raise PermissionDenied("The admin is for staff.")
        if not policy.has_second_factor(user):
            return redirect(f"{reverse('two-factor')}?{urlencode({'next': target})}")
        return redirect(f"{reverse('login-code')}?{urlencode({'next': target})}")
