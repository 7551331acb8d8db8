"""An engine dataclass read off a model row (a tool's spec, a step's record)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from django.db import models

_Record = TypeVar("_Record")


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
