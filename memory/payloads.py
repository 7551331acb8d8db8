"""The JSON shape of a memory item (docs/api.md "Long-term memory"): the API's
and the page's one definition."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist

from memory.models import MemoryItem
from registry.payloads import iso


def source_payload(item: MemoryItem) -> dict[str, Any]:
    """Who wrote it: the run's task and step, or the person; ``label`` in words
    (kept after the task is purged or the person deleted)."""
    return {
        "kind": item.source_kind,
        "task": str(item.source_task_id) if item.source_task_id else None,
        "step": item.source_seq,
        "user": item.source_user.get_username() if item.source_user else None,
        "label": item.source_label,
    }


def superseded_by(item: MemoryItem) -> MemoryItem | None:
    try:
        newer: MemoryItem = item.superseded_by
    except ObjectDoesNotExist:
        return None
    return newer


def memory_payload(item: MemoryItem) -> dict[str, Any]:
    newer = superseded_by(item)
    return {
        "id": str(item.pk),
        "scope": item.scope,
        "user": item.user.get_username() if item.user else None,
        "agent": item.agent.name if item.agent else None,
        "subject": item.subject,
        "text": item.text,
        "status": item.status,
        "state": item.state,
        "expired": item.expired,
        "tainted": item.tainted,
        "tainted_by": list(item.tainted_by or []),
        "source": source_payload(item),
        "supersedes": str(item.supersedes_id) if item.supersedes_id else None,
        "superseded_by": str(newer.pk) if newer is not None else None,
        "forgotten_by": item.forgotten_by or None,
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
        "expires_at": iso(item.expires_at),
    }
