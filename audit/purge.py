"""Retention's one loop: delete in batches, leave one audit tombstone per batch.

Traces and memory both purge this way; the tombstone names what went (the log
itself keeps no payloads, so it stays whole).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from audit.models import AuditKind
from audit.services import audit_append


def purge_in_batches(
    rows: QuerySet[Any],
    *,
    delete: Callable[[list[Any]], object],
    cutoff: datetime,
    kind: AuditKind | str,
    object_type: str,
    listed_as: str,
    batch: int = 500,
) -> int:
    """Delete ``rows`` ``batch`` at a time and return how many went.

    Each batch is one transaction: ``delete`` gets its primary keys, and one
    ``kind`` event records the count, the ``cutoff`` and the keys (under
    ``listed_as``), so a failed batch leaves neither rows gone nor a tombstone.
    """
    total = 0
    while True:
        ids = list(rows.values_list("pk", flat=True)[:batch])
        if not ids:
            return total
        with transaction.atomic():
            delete(ids)
            audit_append(
                kind=kind,
                actor="system",
                object_type=object_type,
                data={
                    "count": len(ids),
                    "before": cutoff.isoformat(),
                    listed_as: [str(pk) for pk in ids],
                },
            )
        total += len(ids)
