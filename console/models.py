"""The console keeps no data of its own: runs, leases and approvals are read where
they live. This model has no table; it holds the console's permissions."""

from __future__ import annotations

from django.db import models


class Console(models.Model):
    """No table (``managed = False``): the content type the permissions hang on."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_console", "Can watch runs, workers and the queue in the console"),
            (
                "operate_console",
                "Can cancel, re-queue and retry any run from the console",
            ),
        ]

    def __str__(self) -> str:
        return "console"
