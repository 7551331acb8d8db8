"""On this database (SQLite, and PostgreSQL in the PostgreSQL pass: there the
backup is ``pg_dump``'s and the restore ``pg_restore``'s): a backup restored over
the same database with ``--force`` puts it back as it was."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection

from audit.models import AuditEvent, AuditKind
from audit.services import audit_append, audit_verify
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.dbsensitive]


@contextlib.contextmanager
def appending_audit_events() -> Iterator[None]:
    stop = threading.Event()
    appended: list[int] = []

    def append() -> None:
        try:
            while not stop.is_set():
                appended.append(audit_append(kind="test.meanwhile").position)
        finally:
            connection.close()

    writer = threading.Thread(target=append)
    writer.start()
    try:
        wait_for(lambda: len(appended) >= 3, 30, what="audit events appended")
        yield
    finally:
        stop.set()
        writer.join(30)


def test_a_forced_restore_puts_the_database_back_as_it_was_backed_up(
    transactional_db, demo, tmp_path: Path
):
    archive = tmp_path / "reach.backup"
    out = io.StringIO()
    # The audit chain grows while the backup is taken: the manifest must still
    # describe exactly the copy (the restore checks where the chain ends).
    with appending_audit_events():
        call_command("backup", str(archive), stdout=out)
    assert f"Backed up {connection.vendor}" in out.getvalue()
    with zipfile.ZipFile(archive) as opened:
        names = opened.namelist()
        manifest = json.loads(opened.read("manifest.json"))
    expected = {"sqlite": "database.sqlite3", "postgresql": "database.pgdump"}
    assert names == ["manifest.json", expected[connection.vendor]]
    events = manifest["audit"]["events"]
    # The backup's own event, and some appended meanwhile, came after its snapshot.
    created = AuditEvent.objects.get(kind=AuditKind.BACKUP_CREATED)
    assert created.object_id == manifest["database"]["sha256"]
    assert created.position > events
    assert AuditEvent.objects.filter(kind="test.meanwhile").count() >= 3

    get_user_model().objects.filter(username="bob").delete()
    audit_append(kind="test.after_backup", actor="test")
    with pytest.raises(CommandError, match="already holds data"):
        call_command("restore", str(archive))

    restored = io.StringIO()
    call_command("restore", str(archive), "--force", stdout=restored)
    assert "Restored. The audit chain verifies" in restored.getvalue()
    assert get_user_model().objects.filter(username="bob").exists()
    assert not AuditEvent.objects.filter(kind="test.after_backup").exists()
    assert AuditEvent.objects.count() == events + 1
    assert not AuditEvent.objects.filter(kind=AuditKind.BACKUP_CREATED).exists()
    assert AuditEvent.objects.last().kind == AuditKind.BACKUP_RESTORED
    assert audit_verify()[1] == []
