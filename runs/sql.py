"""Raw SQL of a run's per-step path, built once from model metadata.

The statements the ORM would send, without its cost per query: the journal's
control check, the claim of a queued task, the fenced bump of a task's rev and
counters, and the INSERT and UPDATE of steps.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections

from runs.models import Step, Task

# Raw SQL of the per-step path: identifiers come from model metadata, every value
# is a parameter, each value prepared by its field exactly as the ORM does it.


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _task_pk_param(pk: Any) -> Any:
    return Task._meta.get_field("id").get_db_prep_value(pk, connection)


@functools.cache
def _control_sql() -> str:
    names = ("lease_owner", "lease_epoch", "cancel_requested", "status")
    columns = ", ".join(_q(name) for name in names)
    table = _q(Task._meta.db_table)
    return f"SELECT {columns} FROM {table} WHERE {_q('id')} = %s"  # noqa: S608


@functools.cache
def _claim_queued_sql() -> str:
    table = _q(Task._meta.db_table)
    return (
        f"UPDATE {table} SET {_q('status')} = %s, {_q('lease_owner')} = %s, "  # noqa: S608
        f"{_q('lease_epoch')} = {_q('lease_epoch')} + 1, "
        f"{_q('lease_expires_at')} = %s, "
        f"{_q('started_at')} = COALESCE({_q('started_at')}, %s), "
        f"{_q('updated_at')} = %s, {_q('rev')} = {_q('rev')} + 1 "
        f"WHERE {_q('id')} = %s AND {_q('origin')} IS NULL AND {_q('status')} = %s "
        f"RETURNING {_q('lease_epoch')}"
    )


@functools.cache
def _bump_sql(fenced: bool, tainted: bool = False) -> str:
    """The bump of :func:`runs.steps._bump`; ``tainted`` also sets the task's
    taint sources (one parameter, after ``updated_at``)."""
    counters = ", ".join(f"{_q(name)} = {_q(name)} + %s" for name in _BUMPED)
    if tainted:
        counters += f", {_q('tainted_by')} = %s"
    fence = (
        f" AND {_q('lease_owner')} = %s AND {_q('lease_epoch')} = %s "
        f"AND {_q('status')} = %s"
        if fenced
        else ""
    )
    returning = ", ".join(_q(name) for name in (*_BUMPED, "cancel_requested"))
    return (
        f"UPDATE {_q(Task._meta.db_table)} SET {counters}, "  # noqa: S608
        f"{_q('updated_at')} = %s WHERE {_q('id')} = %s{fence} RETURNING {returning}"
    )


#: The task's counters a bump adds to and returns, in order.
_BUMPED = (
    "rev",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "step_count",
    "cost_usd",
    "estimated_calls",
)


@functools.cache
def _step_insert_fields() -> tuple[Any, ...]:
    """Every column of a step but its id, in the INSERT's order."""
    names = ("task", "seq", "rev", *Step.RECORD_FIELDS)
    fields = tuple(Step._meta.get_field(name) for name in names)
    columns = {f.column for f in Step._meta.concrete_fields if not f.primary_key}
    # A column the record does not carry would be left to its (missing) default.
    missing = columns - {f.column for f in fields}
    assert not missing, f"steps_insert writes no {sorted(missing)}"
    return fields


def _insert_steps(rows: Sequence[Step]) -> None:
    """One INSERT of ``rows`` with their ids back (``RETURNING``, in the rows'
    order, as ``bulk_create`` relies on too); the ORM's bulk_create costs
    several times the statement on this path, twice per step."""
    db = connections[DEFAULT_DB_ALIAS]
    params = [
        value for row in rows for value in _prepared(_step_insert_fields(), row, db)
    ]
    with db.cursor() as cursor:
        cursor.execute(_step_insert_sql(len(rows)), params)
        ids = [row[0] for row in cursor.fetchall()]
    for row, pk in zip(rows, ids, strict=True):
        row.pk = pk
        row._state.adding = False
        row._state.db = db.alias


def _prepared(fields: Sequence[Any], row: Step, db: Any) -> list[Any]:
    """``row``'s values of ``fields``, each prepared by its field as the ORM does."""
    return [f.get_db_prep_save(getattr(row, f.attname), db) for f in fields]


@functools.cache
def _step_insert_sql(count: int) -> str:
    fields = _step_insert_fields()
    columns = ", ".join(_q(f.column) for f in fields)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return (
        f"INSERT INTO {_q(Step._meta.db_table)} ({columns}) "  # noqa: S608
        f"VALUES {', '.join([one] * count)} RETURNING {_q('id')}"
    )


@functools.cache
def _step_update_fields() -> tuple[Any, ...]:
    return tuple(Step._meta.get_field(name) for name in (*Step.RECORD_FIELDS, "rev"))


@functools.cache
def _step_update_statement() -> str:
    assignments = ", ".join(f"{_q(f.column)} = %s" for f in _step_update_fields())
    table = _q(Step._meta.db_table)
    return f"UPDATE {table} SET {assignments} WHERE {_q('id')} = %s"  # noqa: S608


def _step_update_sql(row: Step) -> tuple[str, list[Any]]:
    """The UPDATE the ORM would send for every recorded field of ``row``."""
    values = _prepared(_step_update_fields(), row, connections[DEFAULT_DB_ALIAS])
    return _step_update_statement(), [*values, row.pk]
