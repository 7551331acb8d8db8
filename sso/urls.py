"""The sign-in routes; the redirect URI to register is ``/oidc/callback/``."""

from __future__ import annotations

from django.urls import path

from sso import views
from sso.config import CALLBACK_ROUTE

urlpatterns = [
    path("authenticate/", views.SSOStart.as_view(), name="sso-start"),
    path("callback/", views.SSOCallback.as_view(), name=CALLBACK_ROUTE),
]
