"""``manage.py purge_memories``: apply REACH_MEMORY_RETENTION_DAYS now."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from memory.services import memories_purge


class Command(BaseCommand):
    help = (
        "Delete memory items superseded, forgotten or expired more than "
        "REACH_MEMORY_RETENTION_DAYS ago (beat runs this hourly)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        days = settings.REACH_MEMORY_RETENTION_DAYS
        if days <= 0:
            self.stdout.write("REACH_MEMORY_RETENTION_DAYS is 0: memory is kept.")
            return
        count = memories_purge()
        self.stdout.write(f"Purged {count} memory item(s) older than {days} days.")
