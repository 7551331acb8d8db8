"""Backup and restore of the whole product: the database, checked end to end.

SQLite: ``backup_create`` copies the live database with SQLite's online backup
API in one step (a read transaction: in WAL mode the web and the workers go on
writing, and the copy is the database as of one moment). PostgreSQL: it runs
``pg_dump --format=custom`` (one snapshot too). Either way the copy goes into an
archive with its manifest (``backups.archive``). ``backup_restore`` checks the
archive, refuses a database that holds data unless forced, puts the copy in
place, migrates it forward when it is older than the code, and checks the audit
chain before recording the restore in it. The keys are not in the archive: keep
``DJANGO_SECRET_KEY`` and the secrets key apart from it (``keys_to_keep``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from audit.models import AuditEvent, AuditHead, AuditKind
from audit.services import audit_append, audit_verify
from backups.archive import (
    MEMBERS,
    BackupFileError,
    Manifest,
    extract_database,
    file_sha256,
    read_manifest,
    write_archive,
)
from registry.models import Secret
from registry.secrets import configured_key_ids, secrets_undecryptable


class BackupError(Exception):
    """A backup or restore refused; the message says why and what to do."""


#: What a database in use holds: a restore over any of these needs ``force``.
IN_USE = [
    ("audit", "AuditEvent"),
    ("runs", "Conversation"),
    ("runs", "Task"),
    ("registry", "Agent"),
    ("registry", "Tool"),
    ("registry", "Secret"),
]


def product_version() -> str:
    try:
        return importlib.metadata.version("agent-reach")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def vendor() -> str:
    if connection.vendor not in MEMBERS:
        raise BackupError(f"No backup for a {connection.vendor} database.")
    return connection.vendor


# Backup ---------------------------------------------------------------------


@dataclass
class Backup:
    path: Path
    manifest: Manifest
    #: The ``pg_dump`` command line that made it (PostgreSQL), without password.
    command: list[str] = field(default_factory=list)


def backup_create(*, path: Path, actor: str, force: bool = False) -> Backup:
    """Back the database up into the archive ``path`` while the product runs."""
    path = path.resolve()
    if path.exists() and not force:
        raise BackupError(f"{path} exists; pass --force to replace it.")
    if not path.parent.is_dir():
        raise BackupError(f"{path.parent} is not a directory.")
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".reach-backup-") as tmp:
        database = Path(tmp) / MEMBERS[vendor()]
        if vendor() == "sqlite":
            migrations, audit, keys = _sqlite_snapshot(database)
            command: list[str] = []
        else:
            migrations, audit, keys, command = _pg_snapshot(database)
        manifest = Manifest(
            version=product_version(),
            created_at=timezone.now().isoformat(),
            vendor=vendor(),
            member=MEMBERS[vendor()],
            size=database.stat().st_size,
            sha256=file_sha256(database),
            migrations=migrations,
            audit=audit,
            secrets_keys=keys,
        )
        write_archive(path, manifest, database)
    audit_append(
        kind=AuditKind.BACKUP_CREATED,
        actor=actor,
        object_type="backup",
        object_id=manifest.sha256,
        data={
            "path": str(path),
            "vendor": manifest.vendor,
            "bytes": manifest.size,
            "audit_events": manifest.audit.get("events", 0),
        },
    )
    return Backup(path=path, manifest=manifest, command=command)


def _sqlite_snapshot(
    target: Path,
) -> tuple[dict[str, list[str]], dict[str, object], dict[str, int]]:
    """Copy the live SQLite database to ``target`` as of one moment; the state
    read from the copy itself, so the manifest describes exactly what it holds."""
    source = sqlite3.connect(connection.settings_dict["NAME"], timeout=20)
    copy = sqlite3.connect(target)
    try:
        # pages=-1: the whole database in one step, under one read transaction;
        # writers in WAL mode are not blocked and cannot restart it.
        source.backup(copy, pages=-1)
        copy.execute("PRAGMA journal_mode=DELETE")
        _check_sqlite(copy, "the copy")
        state = _sqlite_state(copy)
    finally:
        copy.close()
        source.close()
    return state


def _check_sqlite(db: sqlite3.Connection, what: str) -> None:
    try:
        result = db.execute("PRAGMA integrity_check").fetchone()
    except sqlite3.DatabaseError as error:
        raise BackupFileError(f"{what} is not a SQLite database ({error})") from None
    if result is None or result[0] != "ok":
        raise BackupFileError(f"{what} fails SQLite's integrity check: {result}")


def _sqlite_state(
    db: sqlite3.Connection,
) -> tuple[dict[str, list[str]], dict[str, object], dict[str, int]]:
    # The tables' names are the models' own (no outside text in these queries).
    events_table = AuditEvent._meta.db_table
    head_table = AuditHead._meta.db_table
    secrets_table = Secret._meta.db_table
    migrations: dict[str, list[str]] = {}
    for app, name in db.execute("SELECT app, name FROM django_migrations ORDER BY id"):
        migrations.setdefault(app, []).append(name)
    count_events = f'SELECT count(*) FROM "{events_table}"'  # noqa: S608
    events = db.execute(count_events).fetchone()[0]
    last_hash = f'SELECT hash FROM "{head_table}" WHERE id = 1'  # noqa: S608
    head = db.execute(last_hash).fetchone()
    columns = {row[1] for row in db.execute(f'PRAGMA table_info("{secrets_table}")')}
    by_key = (
        f'SELECT key_id, count(*) FROM "{secrets_table}" GROUP BY key_id'  # noqa: S608
        if "key_id" in columns
        else f"SELECT '', count(*) FROM \"{secrets_table}\""  # noqa: S608
    )
    keys = {key: count for key, count in db.execute(by_key) if count}
    return migrations, {"events": events, "last_hash": head[0] if head else ""}, keys


def _state_of() -> tuple[dict[str, list[str]], dict[str, object], dict[str, int]]:
    """The same state, read through the ORM (PostgreSQL, in the snapshot)."""
    migrations: dict[str, list[str]] = {}
    for app, name in MigrationRecorder.Migration.objects.order_by("id").values_list(
        "app", "name"
    ):
        migrations.setdefault(app, []).append(name)
    head = AuditHead.objects.filter(pk=1).first()
    keys: dict[str, int] = {}
    for key in Secret.objects.values_list("key_id", flat=True):
        keys[key] = keys.get(key, 0) + 1
    audit = {
        "events": AuditEvent.objects.count(),
        "last_hash": head.hash if head else "",
    }
    return migrations, audit, keys


def _pg_snapshot(
    target: Path,
) -> tuple[dict[str, list[str]], dict[str, object], dict[str, int], list[str]]:
    """``pg_dump`` into ``target`` of the very snapshot the manifest's state is
    read from: a repeatable-read transaction exports its snapshot and holds it
    while ``pg_dump --snapshot`` dumps it, so the audit chain's end and the
    migrations recorded match the dump however busy the product is."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cursor.execute("SELECT pg_export_snapshot()")
        snapshot = str(cursor.fetchone()[0])
        migrations, audit, keys = _state_of()
        command = pg_dump_command(target)
        _, env = _pg_args("pg_dump")
        _run([*command, "--snapshot", snapshot], env, "pg_dump")
    return migrations, audit, keys, command


def _pg_args(program: str) -> tuple[list[str], dict[str, str]]:
    """``program``'s connection options for this database, and its environment
    (the password goes in ``PGPASSWORD``, never on the command line)."""
    db = connection.settings_dict
    args = [program, "--dbname", str(db["NAME"])]
    for option, key in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if db.get(key):
            args += [option, str(db[key])]
    env = {**os.environ}
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])
    return args, env


def pg_dump_command(target: Path) -> list[str]:
    """The documented ``pg_dump`` of this database (README.md "Backups")."""
    args, _ = _pg_args("pg_dump")
    return [*args, "--format=custom", "--file", str(target)]


def _run(command: list[str], env: dict[str, str], program: str) -> None:
    if shutil.which(program) is None:
        raise BackupError(
            f"{program} is not on PATH: install the PostgreSQL client of the "
            f"server's version (Debian: apt-get install postgresql-client), or "
            f"run by hand: {' '.join(command)}"
        )
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BackupError(
            f"{program} failed ({done.returncode}): {done.stderr.strip()}"
        )


def keys_to_keep() -> list[str]:
    """What a restore needs besides the archive, one line each."""
    generated = Path(settings.VAR_DIR) / "secret_key"
    secret_key = (
        f"DJANGO_SECRET_KEY (generated here into {generated})"
        if not os.environ.get("DJANGO_SECRET_KEY") and generated.exists()
        else "DJANGO_SECRET_KEY (from the environment)"
    )
    if os.environ.get("REACH_SECRETS_KEY"):
        secrets_key = (
            "REACH_SECRETS_KEY (and REACH_SECRETS_OLD_KEYS, if set): it encrypts "
            "the stored secrets"
        )
    else:
        secrets_key = (
            "REACH_SECRETS_KEY is not set, so the stored secrets are encrypted "
            "with DJANGO_SECRET_KEY: keep that, or the secrets are lost"
        )
    return [
        f"{secret_key}: sessions and signed values",
        secrets_key,
        "Redis holds nothing to keep: the database is the source of truth",
    ]


# Restore --------------------------------------------------------------------


@dataclass
class Restore:
    manifest: Manifest
    #: Migrations applied after the restore, the backup being older than the code.
    migrated: list[str]
    audit_events: int
    #: Stored secrets the keyring does not decrypt (the backed-up install's key
    #: is missing).
    undecryptable: list[str]


def database_in_use() -> list[str]:
    """The tables of this database that hold what a product in use holds."""
    tables = set(connection.introspection.table_names())
    models = [get_user_model(), *(apps.get_model(*label) for label in IN_USE)]
    return [
        model._meta.db_table
        for model in models
        if model._meta.db_table in tables and model.objects.exists()
    ]


def backup_restore(*, path: Path, actor: str, force: bool = False) -> Restore:
    """Restore the archive ``path`` into this install's database.

    Checked before anything is touched: the archive is complete (CRCs, the
    database's sha256 and size), of this database's vendor, of migrations this
    code knows (a newer backup is refused), and the database holds nothing a
    product in use holds, unless ``force``. Then the copy replaces the database,
    is migrated forward, and its audit chain is verified (it must end where the
    manifest says) before ``backup.restored`` is appended to it.
    """
    try:
        manifest = read_manifest(path)
    except BackupFileError as error:
        raise BackupError(
            f"{path} is not a usable backup: {error}. Nothing was restored."
        ) from None
    if manifest.vendor != vendor():
        raise BackupError(
            f"{path} is a backup of a {manifest.vendor} database; this install uses "
            f"{vendor()}. Restore it into an install of the same kind."
        )
    unknown = _unknown_migrations(manifest.migrations)
    if unknown:
        raise BackupError(
            f"{path} was made by a newer version ({manifest.version}): this code "
            f"does not have its migrations {', '.join(unknown[:5])}"
            f"{' …' if len(unknown) > 5 else ''}. Install that version (or newer) "
            "and restore again. Nothing was restored."
        )
    in_use = database_in_use()
    if in_use and not force:
        raise BackupError(
            f"This database already holds data ({', '.join(in_use)}): restoring "
            "would replace it. Restore into a fresh install, or pass --force to "
            "replace it. Nothing was restored."
        )
    with tempfile.TemporaryDirectory(
        prefix=".reach-restore-", dir=_scratch_dir()
    ) as tmp:
        database = Path(tmp) / manifest.member
        try:
            extract_database(path, manifest, database)
            if manifest.vendor == "sqlite":
                _sqlite_check_copy(database, manifest)
        except BackupFileError as error:
            raise BackupError(
                f"{path} is not a usable backup: {error}. Nothing was restored."
            ) from None
        if manifest.vendor == "sqlite":
            _sqlite_put(database)
        else:
            _pg_put(database)
    before = _applied()
    call_command("migrate", interactive=False, verbosity=0, stdout=io.StringIO())
    migrated = sorted(f"{app}.{name}" for app, name in _applied() - before)
    count, problems = audit_verify()
    if problems:
        raise BackupError(
            "The restored audit log does not verify: " + "; ".join(problems[:3])
        )
    head = AuditHead.objects.filter(pk=1).first()
    if count != manifest.audit.get("events") or (head.hash if head else "") != (
        manifest.audit.get("last_hash") or ""
    ):
        raise BackupError(
            f"The restored audit log ends at event {count}, the manifest at "
            f"{manifest.audit.get('events')}: the database is not the one backed up."
        )
    audit_append(
        kind=AuditKind.BACKUP_RESTORED,
        actor=actor,
        object_type="backup",
        object_id=manifest.sha256,
        data={
            "path": str(path),
            "created_at": manifest.created_at,
            "version": manifest.version,
            "migrated": migrated,
        },
    )
    return Restore(
        manifest=manifest,
        migrated=migrated,
        audit_events=count + 1,
        undecryptable=secrets_undecryptable(),
    )


def missing_keys(manifest: Manifest) -> list[str]:
    """Key ids the backup's secrets were encrypted with that the keyring lacks."""
    held = set(configured_key_ids())
    return sorted(key for key in manifest.secrets_keys if key and key not in held)


def _scratch_dir() -> Path | None:
    if vendor() == "sqlite":
        return Path(connection.settings_dict["NAME"]).resolve().parent
    return None


def _applied() -> set[tuple[str, str]]:
    return set(MigrationRecorder(connection).applied_migrations())


def _unknown_migrations(migrations: dict[str, list[str]]) -> list[str]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    known = set(loader.disk_migrations)
    for migration in loader.disk_migrations.values():
        known.update(migration.replaces)
    return [
        f"{app}.{name}"
        for app, names in migrations.items()
        for name in names
        if (app, name) not in known
    ]


def _sqlite_check_copy(database: Path, manifest: Manifest) -> None:
    db = sqlite3.connect(database)
    try:
        _check_sqlite(db, "its database")
        migrations, _, _ = _sqlite_state(db)
    finally:
        db.close()
    if migrations != manifest.migrations:
        raise BackupFileError("its database's migrations differ from its manifest")


def _sqlite_put(database: Path) -> None:
    """Copy ``database`` over this install's, through SQLite's backup API (it
    takes the database's locks, unlike a file moved under an open connection)."""
    connections.close_all()
    target = Path(connection.settings_dict["NAME"])
    with (
        contextlib.closing(sqlite3.connect(database)) as source,
        contextlib.closing(sqlite3.connect(target, timeout=20)) as live,
    ):
        source.backup(live, pages=-1)
        live.execute("PRAGMA journal_mode=WAL")


def _pg_put(database: Path) -> None:
    """Empty this PostgreSQL database of its tables, then ``pg_restore`` into it
    in one transaction."""
    tables = connection.introspection.table_names()
    with transaction.atomic(), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    args, env = _pg_args("pg_restore")
    _run(
        [
            *args,
            "--no-owner",
            "--clean",
            "--if-exists",
            "--exit-on-error",
            "--single-transaction",
            str(database),
        ],
        env,
        "pg_restore",
    )
    connections.close_all()
