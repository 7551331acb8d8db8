from __future__ import annotations

from django.apps import AppConfig


class ReachSiteConfig(AppConfig):
    """The site wires nothing: each app fills the slots and connects the signals of
    the layers below it in its own ``AppConfig.ready`` (infra/slots.py)."""

    name = "reach_site"
