from __future__ import annotations

from django.apps import AppConfig


class ReachSiteConfig(AppConfig):
    name = "reach_site"
