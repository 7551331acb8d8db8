"""On this database (SQLite, and PostgreSQL in the PostgreSQL pass: there the
backup is ``pg_dump``'s and the restore ``pg_restore``'s): a backup restored over
the same database with ``--force`` puts it back as it was."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection

from audit.models import AuditEvent, AuditKind
from audit.services import audit_append, audit_verify

pytestmark = [pytest.mark.dbsensitive]


def test_a_forced_restore_puts_the_database_back_as_it_was_backed_up(
    transactional_db, demo, tmp_path: Path
):
    archive = tmp_path / "reach.backup"
    out = io.StringIO()
    call_command("backup", str(archive), stdout=out)
    assert f"Backed up {connection.vendor}" in out.getvalue()
    with zipfile.ZipFile(archive) as opened:
        names = opened.namelist()
        manifest = json.loads(opened.read("manifest.json"))
    expected = {"sqlite": "database.sqlite3", "postgresql": "database.pgdump"}
    assert names == ["manifest.json", expected[connection.vendor]]
    # The backup's own event comes after its snapshot.
    assert AuditEvent.objects.last().kind == AuditKind.BACKUP_CREATED
    events = manifest["audit"]["events"]
    assert events == AuditEvent.objects.count() - 1

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
    assert AuditEvent.objects.last().kind == AuditKind.BACKUP_RESTORED
    assert audit_verify()[1] == []
