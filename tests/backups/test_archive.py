"""What a restore refuses before it touches anything: a truncated or corrupted
file, a manifest that does not match its database, a backup newer than the code,
a database that holds data (without ``--force``)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from audit.models import AuditEvent, AuditKind

pytestmark = pytest.mark.django_db


@pytest.fixture
def archive(demo, tmp_path: Path) -> Path:
    path = tmp_path / "reach.backup"
    call_command("backup", str(path), stdout=io.StringIO())
    return path


def state() -> tuple[int, int]:
    return get_user_model().objects.count(), AuditEvent.objects.count()


def refused(path: Path, *, force: bool = True) -> str:
    with pytest.raises(CommandError) as raised:
        call_command("restore", str(path), *(["--force"] if force else []))
    return str(raised.value)


def rewritten(source: Path, target: Path, manifest: dict) -> Path:
    """``source`` with its manifest replaced by ``manifest``."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        new.writestr("manifest.json", json.dumps(manifest))
        new.writestr("database.sqlite3", old.read("database.sqlite3"))
    return target


def manifest_of(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("manifest.json"))


def test_the_backup_is_an_archive_whose_manifest_describes_its_database(archive):
    manifest = manifest_of(archive)
    assert manifest["format"] == "reach.backup/v1"
    assert manifest["version"] == "0.1.0"
    assert manifest["database"]["vendor"] == "sqlite"
    assert "0005_secret_key_id" in manifest["migrations"]["registry"]
    assert manifest["created_at"]
    with zipfile.ZipFile(archive) as opened:
        info = opened.getinfo("database.sqlite3")
    assert info.file_size == manifest["database"]["bytes"]
    assert len(manifest["database"]["sha256"]) == 64
    created = AuditEvent.objects.filter(kind=AuditKind.BACKUP_CREATED).get()
    assert created.object_id == manifest["database"]["sha256"]


@pytest.mark.parametrize("keep", [0.5, 0.99, 0.01])
def test_a_truncated_backup_is_refused_and_nothing_is_restored(
    archive, tmp_path: Path, keep: float
):
    data = archive.read_bytes()
    cut = tmp_path / "cut.backup"
    cut.write_bytes(data[: int(len(data) * keep)])
    before = state()
    message = refused(cut)
    assert "truncated or corrupted" in message
    assert "Nothing was restored." in message
    assert state() == before


def test_a_corrupted_backup_is_refused(archive, tmp_path: Path):
    data = bytearray(archive.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = b"\x00" * 8
    bad = tmp_path / "bad.backup"
    bad.write_bytes(bytes(data))
    before = state()
    message = refused(bad)
    assert "corrupted" in message and "Nothing was restored." in message
    assert state() == before


def test_a_manifest_that_does_not_match_its_database_is_refused(
    archive, tmp_path: Path
):
    manifest = manifest_of(archive)
    manifest["database"]["sha256"] = "0" * 64
    lying = rewritten(archive, tmp_path / "lying.backup", manifest)
    assert "does not match its manifest" in refused(lying)


def test_a_backup_newer_than_the_code_is_refused(archive, tmp_path: Path):
    manifest = manifest_of(archive)
    manifest["version"] = "9.0.0"
    manifest["migrations"]["runs"].append("0099_from_the_future")
    newer = rewritten(archive, tmp_path / "newer.backup", manifest)
    message = refused(newer)
    assert "newer version (9.0.0)" in message
    assert "runs.0099_from_the_future" in message


def test_a_database_that_holds_data_is_not_replaced_without_force(archive):
    message = refused(archive, force=False)
    assert "already holds data" in message and "--force" in message


def test_a_bare_pg_dump_is_told_how_to_restore(tmp_path: Path, db):
    dump = tmp_path / "reach.pgdump"
    dump.write_bytes(b"PGDMP\x01\x0e\x00" + b"\x00" * 64)
    assert "pg_restore" in refused(dump)


def test_a_missing_file_is_refused(tmp_path: Path, db):
    assert "no such file" in refused(tmp_path / "nothing.backup")


def test_backup_does_not_replace_a_file_without_force(archive):
    with pytest.raises(CommandError, match="exists; pass --force"):
        call_command("backup", str(archive))
    call_command("backup", str(archive), "--force", stdout=io.StringIO())
    assert manifest_of(archive)["format"] == "reach.backup/v1"
