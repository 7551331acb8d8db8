"""History only: the ``agents`` app once held every model.

Its migrations created the tables that ``registry``, ``runs`` and ``effects`` now own
under the same names; the app stays installed so that databases created before the
re-cut (and new ones) replay one migration history. It has no models and no code.
"""

from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents (migration history)"
    default_auto_field = "django.db.models.BigAutoField"
