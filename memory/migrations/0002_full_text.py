"""The full-text index of memory items, per database.

SQLite: an FTS5 table keyed by ``search_rowid``, kept in step with the items by
triggers on insert, update and delete (cascades included). PostgreSQL: a GIN
index on the weighted ``tsvector`` that ``memory.search`` queries. Both index
the items' ``subject_terms`` and ``text_terms`` (CJK bigrams made in Python).
"""

from __future__ import annotations

from django.db import migrations

TABLE = "memory_memoryitem"

SQLITE_UP = [
    "CREATE VIRTUAL TABLE memory_fts USING fts5(subject, body, "
    "tokenize = 'unicode61')",
    f"""CREATE TRIGGER memory_fts_insert AFTER INSERT ON {TABLE} BEGIN
        INSERT INTO memory_fts(rowid, subject, body)
        VALUES (new.search_rowid, new.subject_terms, new.text_terms);
    END""",
    f"""CREATE TRIGGER memory_fts_delete AFTER DELETE ON {TABLE} BEGIN
        DELETE FROM memory_fts WHERE rowid = old.search_rowid;
    END""",
    f"""CREATE TRIGGER memory_fts_update
        AFTER UPDATE OF subject_terms, text_terms, search_rowid ON {TABLE} BEGIN
        DELETE FROM memory_fts WHERE rowid = old.search_rowid;
        INSERT INTO memory_fts(rowid, subject, body)
        VALUES (new.search_rowid, new.subject_terms, new.text_terms);
    END""",
    # Items written before this migration (none in a new database).
    f"""INSERT INTO memory_fts(rowid, subject, body)
        SELECT search_rowid, subject_terms, text_terms FROM {TABLE}""",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS memory_fts_update",
    "DROP TRIGGER IF EXISTS memory_fts_delete",
    "DROP TRIGGER IF EXISTS memory_fts_insert",
    "DROP TABLE IF EXISTS memory_fts",
]

# The same expression as memory.search.PG_DOCUMENT.
PG_DOCUMENT = (
    "(setweight(to_tsvector('simple'::regconfig, subject_terms), 'A') || "
    "setweight(to_tsvector('simple'::regconfig, text_terms), 'B'))"
)
PG_UP = [f"CREATE INDEX memory_item_fts ON {TABLE} USING GIN ({PG_DOCUMENT})"]
PG_DOWN = ["DROP INDEX IF EXISTS memory_item_fts"]


def _run(statements: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_UP, "postgresql": PG_UP}),
            _run({"sqlite": SQLITE_DOWN, "postgresql": PG_DOWN}),
        )
    ]
