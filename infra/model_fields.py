"""Field definitions several of the apps' tables use.

Each factory returns a new field exactly as the tables declared it before, so
using one changes no schema (no migration). Reading an engine dataclass off a
row is :func:`infra.records.record_of`.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models


def uuid_id() -> models.UUIDField[Any, Any]:
    """A random UUID primary key: ids that can be shown in URLs and guessed by no
    one."""
    return models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)


def optional_user(*, related_name: str | None = None) -> models.ForeignKey[Any, Any]:
    """The person who did something (wrote, changed, decided), if any: deleting
    the user keeps the row and forgets only who it was."""
    return models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name=related_name,
    )
