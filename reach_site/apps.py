from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class ReachSiteConfig(AppConfig):
    name = "reach_site"

    def ready(self) -> None:
        # The site wires the apps together: each app's ``plugs`` module plugs it
        # into the ports of the layers below it (runs/ports.py, infra.runtime)
        # and hooks its signals, at its top level. They import models, so they
        # are imported here, once every app is loaded, in INSTALLED_APPS order
        # (as the admin finds each app's ``admin`` module).
        autodiscover_modules("plugs")
