"""What the apps' models share: field definitions several tables use, and reading
an engine dataclass off a row.

Each factory returns a new field exactly as the tables declared it before, so
using one changes no schema (no migration).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, TypeVar

from django.conf import settings
from django.db import models

_Record = TypeVar("_Record")


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


def record_of(row: models.Model, cls: type[_Record], **converted: Any) -> _Record:
    """The dataclass ``cls`` read off ``row``: each field from the row's attribute
    of that name, but those in ``converted`` (enums, fresh containers, values
    worked out) as given.

    A field the dataclass gains and the row lacks fails here, loudly, instead of
    silently taking its default; so does a conversion of a field it lacks.
    """
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = converted.keys() - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    values = {
        name: converted[name] if name in converted else getattr(row, name)
        for name in names
    }
    return cls(**values)
