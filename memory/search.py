"""Ranked full-text search over memory items, on SQLite and PostgreSQL alike.

Both databases index the same terms: ``effects.search.tokens`` of the subject
and of the text (Latin words; CJK runs and their character bigrams, since
neither database's tokenizer splits Chinese), kept on the row as
``subject_terms`` and ``text_terms``. SQLite keeps them in an FTS5 table that
triggers maintain on every insert, update and delete of an item (migration
0002) and ranks by bm25; PostgreSQL indexes a weighted ``tsvector`` of them with
GIN and ranks by ``ts_rank``. A query matches any of its terms; a term in the
subject weighs more than one in the text.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from effects.search import terms, tokens
from memory.models import MemoryItem

#: Terms kept of one item (bounds what a very long text costs the index).
MAX_DOCUMENT_TERMS = 4000
#: bm25 weights of the FTS5 columns (subject, text).
SUBJECT_WEIGHT = 3.0
TEXT_WEIGHT = 1.0

FTS_TABLE = "memory_fts"
#: The weighted document PostgreSQL indexes (migration 0002 builds the same
#: expression, so the GIN index serves the query).
PG_DOCUMENT = (
    "(setweight(to_tsvector('simple'::regconfig, {t}.subject_terms), 'A') || "
    "setweight(to_tsvector('simple'::regconfig, {t}.text_terms), 'B'))"
)


#: Words too common to say what a question is about: without them "what is my
#: name" would match every item that holds "is".
STOP_WORDS = frozenset(
    " ".join(
        (
            "a an and are as at be but by can could did do does for from had has",
            "have how i if in is it its me my of on or our please should so than",
            "that the their them then there these they this to us was we were what",
            "when where which who why will with would you your",
            "什么 怎么 我的 你的 一个 这个 那个 是不 不是 请问 一下",
        )
    ).split()
)


def query_terms(query: str) -> list[str]:
    """The terms of ``query`` worth matching on (stop words and lone Latin
    letters or digits left out)."""
    return [
        term
        for term in terms(query)
        if term not in STOP_WORDS and not (len(term) == 1 and term.isascii())
    ]


def document_terms(text: str) -> str:
    """``text`` as the space-separated terms the index holds."""
    kept = []
    for term in tokens(text):
        kept.append(term)
        if len(kept) >= MAX_DOCUMENT_TERMS:
            break
    return " ".join(kept)


def index_terms(item: MemoryItem) -> None:
    """Set the item's terms from its subject and text (before it is saved)."""
    item.subject_terms = document_terms(item.subject)
    item.text_terms = document_terms(item.text)


@dataclass(frozen=True)
class Scope:
    """Whose items a search reads: a user's own, an agent's, or both."""

    user_id: Any = None
    agent_id: Any = None
    #: Every agent's items (an admin's search of agent memory).
    any_agent: bool = False

    @property
    def empty(self) -> bool:
        return self.user_id is None and self.agent_id is None and not self.any_agent


def ranked_ids(
    query: str,
    *,
    scope: Scope,
    statuses: Sequence[str] = (MemoryItem.Status.LIVE,),
    unexpired_at: datetime | None = None,
    limit: int = 10,
) -> list[uuid.UUID]:
    """Ids of ``scope``'s items matching ``query``, best first (ties: newest).

    ``unexpired_at`` leaves out the items that expired by then.
    """
    words = query_terms(query)
    if not words or scope.empty:
        return []
    where, params = _filters(scope, statuses, unexpired_at)
    if connection.vendor == "postgresql":
        sql = _postgres(where)
        match = " | ".join(_pg_lexeme(w) for w in words)
    else:
        sql = _sqlite(where)
        match = " OR ".join(_fts_phrase(w) for w in words)
    with connection.cursor() as cursor:
        # The match comes first in both statements, the filters' values next.
        cursor.execute(sql, [match, *params, limit])
        rows = cursor.fetchall()
    return [_uuid(row[0]) for row in rows]


def _filters(
    scope: Scope, statuses: Sequence[str], unexpired_at: datetime | None
) -> tuple[str, list[Any]]:
    field = MemoryItem._meta.get_field
    owners = []
    params: list[Any] = []
    if scope.user_id is not None:
        owners.append("(m.scope = %s AND m.user_id = %s)")
        params += [MemoryItem.Scope.USER.value, scope.user_id]
    if scope.any_agent:
        owners.append("(m.scope = %s)")
        params.append(MemoryItem.Scope.AGENT.value)
    elif scope.agent_id is not None:
        owners.append("(m.scope = %s AND m.agent_id = %s)")
        params += [MemoryItem.Scope.AGENT.value, scope.agent_id]
    where = ["(" + " OR ".join(owners) + ")"]
    where.append("m.status IN (" + ", ".join(["%s"] * len(statuses)) + ")")
    params += [str(s) for s in statuses]
    if unexpired_at is not None:
        where.append("(m.expires_at IS NULL OR m.expires_at > %s)")
        params.append(
            field("expires_at").get_db_prep_value(unexpired_at, connection)  # type: ignore[union-attr]
        )
    return " AND ".join(where), params


def _sqlite(where: str) -> str:
    table = MemoryItem._meta.db_table
    sql = (
        f"SELECT m.id FROM {FTS_TABLE} JOIN {table} m "  # noqa: S608
        f"ON m.search_rowid = {FTS_TABLE}.rowid "
        f"WHERE {FTS_TABLE} MATCH %s AND {where} "
        f"ORDER BY bm25({FTS_TABLE}, {SUBJECT_WEIGHT}, {TEXT_WEIGHT}), "
        "m.updated_at DESC LIMIT %s"
    )
    return sql


def _postgres(where: str) -> str:
    table = MemoryItem._meta.db_table
    document = PG_DOCUMENT.format(t="m")
    sql = (
        f"SELECT m.id FROM {table} m, "  # noqa: S608
        "to_tsquery('simple'::regconfig, %s) q "
        f"WHERE {document} @@ q AND {where} "
        f"ORDER BY ts_rank({document}, q) DESC, m.updated_at DESC LIMIT %s"
    )
    return sql


def _fts_phrase(term: str) -> str:
    # A quoted FTS5 string is matched as a phrase of its tokens, never as syntax.
    return '"' + term.replace('"', '""') + '"'


def _pg_lexeme(term: str) -> str:
    # A quoted lexeme is taken as it is: no operator inside it is read as one.
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
