"""The backup file: a zip archive of a manifest and the database.

``manifest.json`` says what the archive holds (the product's version, the
database's vendor and its migration state, when it was made, the audit chain's
end, the keys the stored secrets need) and the sha256 of the database member,
so a restore checks the file before it touches anything. A zip keeps its
directory at the end and a CRC per member: a truncated or corrupted file is
refused, never half restored. ``unzip -l`` lists one; any zip tool opens it.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "reach.backup/v1"
MANIFEST = "manifest.json"
#: The database member of each vendor: SQLite's file as it is, PostgreSQL's
#: ``pg_dump --format=custom`` archive.
MEMBERS = {"sqlite": "database.sqlite3", "postgresql": "database.pgdump"}
_CHUNK = 1 << 20


class BackupFileError(Exception):
    """A file that is not a complete, valid backup; the message says why."""


@dataclass(frozen=True)
class Manifest:
    version: str
    created_at: str
    vendor: str
    member: str
    size: int
    sha256: str
    #: Applied migrations, ``{app: [name, ...]}`` in the order they were applied.
    migrations: dict[str, list[str]]
    #: ``{"events": n, "last_hash": h}``: the audit chain's end in the backup.
    audit: dict[str, Any]
    #: ``{key id: secrets it encrypted}`` in the backup (``""``: not recorded).
    secrets_keys: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "product": "agent-reach",
            "version": self.version,
            "created_at": self.created_at,
            "database": {
                "vendor": self.vendor,
                "member": self.member,
                "bytes": self.size,
                "sha256": self.sha256,
            },
            "migrations": self.migrations,
            "audit": self.audit,
            "secrets_keys": self.secrets_keys,
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BackupFileError(
                f"its manifest is not a {FORMAT} manifest "
                f"(format {data.get('format') if isinstance(data, dict) else None!r})"
            )
        try:
            database = data["database"]
            return cls(
                version=str(data["version"]),
                created_at=str(data["created_at"]),
                vendor=str(database["vendor"]),
                member=str(database["member"]),
                size=int(database["bytes"]),
                sha256=str(database["sha256"]),
                migrations={
                    str(app): [str(name) for name in names]
                    for app, names in dict(data["migrations"]).items()
                },
                audit=dict(data["audit"]),
                secrets_keys={
                    str(k): int(v) for k, v in dict(data["secrets_keys"]).items()
                },
            )
        except (KeyError, TypeError, ValueError) as error:
            raise BackupFileError(f"its manifest lacks or garbles {error}") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_archive(path: Path, manifest: Manifest, database: Path) -> None:
    """Write the archive next to ``path`` and move it there once complete, so a
    crash leaves no file at ``path`` that looks like a backup."""
    partial = path.with_name(path.name + ".partial")
    # A pg_dump archive is compressed already.
    compression = (
        zipfile.ZIP_STORED if manifest.vendor == "postgresql" else zipfile.ZIP_DEFLATED
    )
    with zipfile.ZipFile(
        partial, "w", compression=compression, allowZip64=True
    ) as archive:
        archive.writestr(
            MANIFEST, json.dumps(manifest.as_json(), indent=2, ensure_ascii=False)
        )
        archive.write(database, manifest.member)
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, path)


def read_manifest(path: Path) -> Manifest:
    """The manifest of the backup at ``path``, after checking every member's CRC.

    Raises :class:`BackupFileError` for a missing, truncated or corrupted file.
    """
    if not path.is_file():
        raise BackupFileError("there is no such file")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
            if bad is not None:
                raise BackupFileError(f"its member {bad} is corrupted (bad CRC)")
            try:
                raw = archive.read(MANIFEST)
            except KeyError:
                raise BackupFileError(f"it holds no {MANIFEST}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        if _is_pg_dump(path):
            raise BackupFileError(
                "it is a bare pg_dump archive, not a backup of manage.py backup: "
                "restore it with pg_restore, then run manage.py migrate"
            ) from None
        raise BackupFileError(
            f"it is truncated or corrupted: not a complete zip archive ({error})"
        ) from None
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise BackupFileError(f"its manifest is not JSON ({error})") from None
    return Manifest.from_json(data)


def extract_database(path: Path, manifest: Manifest, target: Path) -> None:
    """Copy the database member to ``target``, checking size and sha256."""
    digest = hashlib.sha256()
    try:
        with (
            zipfile.ZipFile(path) as archive,
            archive.open(manifest.member) as source,
            target.open("wb") as out,
        ):
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except KeyError:
        raise BackupFileError(f"it holds no {manifest.member}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise BackupFileError(f"its database is corrupted ({error})") from None
    size = target.stat().st_size
    if size != manifest.size or digest.hexdigest() != manifest.sha256:
        raise BackupFileError(
            f"its database does not match its manifest ({size} bytes, sha256 "
            f"{digest.hexdigest()[:16]}…; the manifest says {manifest.size} bytes, "
            f"{manifest.sha256[:16]}…)"
        )


def _is_pg_dump(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(5) == b"PGDMP"
