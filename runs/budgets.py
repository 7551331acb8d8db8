"""Daily budgets: what a user may spend per day before a new message is refused.

A user's budget is their :class:`~runs.models.DailyBudget` row, else the default
row (no user), else none. The day is the calendar day in ``TIME_ZONE``; what
counts is the cost and the tokens (estimated ones too) of the user's runs
created that day, imported traces aside. A run whose model has no price adds
tokens but no cost. The check is one aggregate query per new message: no step
of a run reads it.

A run's cost is known only as it goes, so an accepted run also holds its own
limits (:class:`~runs.models.BudgetHold`, at most what was left) until it ends:
a message sent meanwhile sees the hold. The check and the hold are taken in the
transaction that accepts the message, under the user's row lock
(:func:`budget_take`), so two messages sent at once cannot both pass on what
only one may spend. (SQLite: the accepting transaction is IMMEDIATE, it holds
the database's write lock from its start.)
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import asdict, dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from engine.pricing import ModelPrice, format_usd
from engine.spec import Limits
from infra.durations import duration_words
from infra.errors import ErrorKind, ServiceError
from runs.models import BudgetHold, DailyBudget, Task


@dataclass(frozen=True)
class BudgetStatus:
    """A user's budget today: the limits, what was spent, when it resets."""

    max_cost_usd: float | None
    max_tokens: int | None
    spent_cost_usd: float
    spent_tokens: int
    resets_at: dt.datetime
    #: What the user's runs still going hold beyond what they spent so far.
    held_cost_usd: float = 0.0
    held_tokens: int = 0

    @property
    def cost_left(self) -> float | None:
        """USD neither spent nor held today (None: no limit in USD)."""
        if self.max_cost_usd is None:
            return None
        return max(self.max_cost_usd - self.spent_cost_usd - self.held_cost_usd, 0.0)

    @property
    def tokens_left(self) -> int | None:
        """Tokens neither spent nor held today (None: no limit in tokens)."""
        if self.max_tokens is None:
            return None
        return max(self.max_tokens - self.spent_tokens - self.held_tokens, 0)

    @property
    def cost_exceeded(self) -> bool:
        return self.cost_left is not None and self.cost_left <= 0

    @property
    def tokens_exceeded(self) -> bool:
        return self.tokens_left is not None and self.tokens_left <= 0

    @property
    def exceeded(self) -> bool:
        return self.cost_exceeded or self.tokens_exceeded

    def retry_after_s(self, now: dt.datetime | None = None) -> int:
        now = now or timezone.now()
        return max(1, int((self.resets_at - now).total_seconds()) + 1)

    @property
    def summary(self) -> str:
        """``$0.12 of $1.00 · 5,300 of 100,000 tokens`` (what is limited)."""
        parts = []
        if self.max_cost_usd is not None:
            parts.append(
                f"{format_usd(self.spent_cost_usd)} of {format_usd(self.max_cost_usd)}"
            )
        if self.max_tokens is not None:
            parts.append(f"{self.spent_tokens:,} of {self.max_tokens:,} tokens")
        held = []
        if self.max_cost_usd is not None and self.held_cost_usd > 0:
            held.append(format_usd(self.held_cost_usd))
        if self.max_tokens is not None and self.held_tokens > 0:
            held.append(f"{self.held_tokens:,} tokens")
        if held:
            parts.append(f"{' and '.join(held)} held by runs still going")
        return " · ".join(parts)

    def message(self, now: dt.datetime | None = None) -> str:
        """What the user is told when a message is refused."""
        local = timezone.localtime(self.resets_at)
        wait = duration_words(self.retry_after_s(now))
        return (
            f"Your daily budget is used up ({self.summary}). It resets at "
            f"{local:%Y-%m-%d %H:%M} {local.tzname()} (in {wait}); ask an admin "
            "to raise it (Admin → Daily budgets) if you need more today."
        )

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "spent_cost_usd": round(self.spent_cost_usd, 8),
            "held_cost_usd": round(self.held_cost_usd, 8),
            "resets_at": self.resets_at.isoformat(),
        }


class DailyBudgetExceeded(ServiceError):
    """The user's daily budget is used up; ``status`` says how and until when.

    An answer carries the budget and when it resets, and says when to try again
    (``Retry-After``).
    """

    default_kind = ErrorKind.TOO_MANY

    def __init__(self, status: BudgetStatus) -> None:
        super().__init__(status.message())
        self.status = status

    @property
    def extra(self) -> dict[str, Any]:
        return {
            "budget": self.status.as_json(),
            "resets_at": self.status.resets_at.isoformat(),
        }

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.status.retry_after_s())}


def budget_of(user: Any) -> DailyBudget | None:
    """The user's own budget, else the default one, else None."""
    rows = DailyBudget.objects.filter(Q(user=user) | Q(user__isnull=True))
    own = default = None
    for row in rows:
        if row.user_id is None:
            default = default or row
        else:
            own = row
    return own or default


def day_bounds(now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    """The start of today and of tomorrow in ``TIME_ZONE`` (aware)."""
    local = timezone.localtime(now or timezone.now())
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow = (start + dt.timedelta(days=1)).date()
    end = timezone.make_aware(dt.datetime.combine(tomorrow, dt.time.min))
    return start, end


def _limiting(budget: DailyBudget | None) -> DailyBudget | None:
    """``budget`` when it limits anything."""
    if budget is None or (budget.max_cost_usd is None and budget.max_tokens is None):
        return None
    return budget


def budget_status(*, user: Any, now: dt.datetime | None = None) -> BudgetStatus | None:
    """The user's budget today, or None when no budget applies to them."""
    budget = _limiting(budget_of(user))
    return None if budget is None else _status(user, budget, now)


def _status(user: Any, budget: DailyBudget, now: dt.datetime | None) -> BudgetStatus:
    start, end = day_bounds(now)
    created = Task._meta.get_field("created_at").get_db_prep_save(start, connection)
    with connection.cursor() as cursor:
        going = [str(status) for status in Task.ACTIVE]
        cursor.execute(_spent_sql(), [*going, *going, user.pk, created])
        cost, tokens, held_cost, held_tokens = cursor.fetchone()
    return BudgetStatus(
        max_cost_usd=budget.max_cost_usd,
        max_tokens=budget.max_tokens,
        spent_cost_usd=float(cost or 0.0),
        spent_tokens=int(tokens or 0),
        resets_at=end,
        held_cost_usd=float(held_cost or 0.0),
        held_tokens=int(held_tokens or 0),
    )


@functools.cache
def _spent_sql() -> str:
    """What the user's runs created since a time spent, and what those still
    going hold beyond it: one statement, without the ORM's cost per query
    (a message of a user with a budget reads it)."""
    q = connection.ops.quote_name
    task, hold = q(Task._meta.db_table), q(BudgetHold._meta.db_table)
    owner, held_by = _column(Task, "owner"), _column(BudgetHold, "task")
    cost, tokens = f"t.{q('cost_usd')}", f"t.{q('total_tokens')}"
    going = f"t.{q('status')} IN (%s, %s, %s)"
    return (
        f"SELECT SUM({cost}), SUM({tokens}), "  # noqa: S608
        f"SUM(CASE WHEN {going} AND h.{q('cost_usd')} > COALESCE({cost}, 0.0) "
        f"THEN h.{q('cost_usd')} - COALESCE({cost}, 0.0) ELSE 0.0 END), "
        f"SUM(CASE WHEN {going} AND h.{q('tokens')} > {tokens} "
        f"THEN h.{q('tokens')} - {tokens} ELSE 0 END) "
        f"FROM {task} t LEFT JOIN {hold} h ON h.{held_by} = t.{q('id')} "
        f"WHERE t.{owner} = %s AND t.{q('created_at')} >= %s "
        f"AND t.{q('origin')} IS NULL"
    )


def budget_check(*, user: Any, now: dt.datetime | None = None) -> BudgetStatus | None:
    """Raise :class:`DailyBudgetExceeded` when the user may not start a run now;
    return their budget's status (None when none applies)."""
    status = budget_status(user=user, now=now)
    if status is not None and status.exceeded:
        raise DailyBudgetExceeded(status)
    return status


def budget_take(*, user: Any, now: dt.datetime | None = None) -> BudgetStatus | None:
    """:func:`budget_check` under the user's row lock, inside the transaction
    that accepts their message (and holds for it, :func:`budget_hold`): a
    second message of the user waits here until the first one's run and hold
    are committed, and counts them.

    With no budget for the user, the lock is not taken: one query, as before.
    """
    budget = _limiting(budget_of(user))
    if budget is None:
        return None
    # NO KEY: the run's row refers to the user's; FOR UPDATE would block that.
    # (SQLite has no row locks: its IMMEDIATE transaction holds the database's.)
    list(
        get_user_model()
        .objects.select_for_update(no_key=True)
        .filter(pk=user.pk)
        .values_list("pk", flat=True)
    )
    status = _status(user, budget, now)
    if status.exceeded:
        raise DailyBudgetExceeded(status)
    return status


def budget_hold(
    *,
    task: Task,
    status: BudgetStatus,
    limits: Limits,
    price: ModelPrice | None,
) -> None:
    """Hold for ``task`` what it may spend by its own limits, at most what is left.

    Its token budget, and in USD its cost limit, else its token budget at its
    price's dearest rate; an unpriced run adds no cost, so it holds none.
    """
    tokens = 0
    if status.tokens_left is not None:
        tokens = min(limits.token_budget, status.tokens_left)
    cost = 0.0
    if status.cost_left is not None and price is not None:
        most = limits.max_cost_usd
        if most is None:
            rates = (price.input_per_m, price.output_per_m, price.cached_input_per_m)
            most = limits.token_budget * max(r or 0.0 for r in rates) / 1_000_000
        cost = min(most, status.cost_left)
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {q(BudgetHold._meta.db_table)} "  # noqa: S608
            f"({_column(BudgetHold, 'task')}, {q('tokens')}, {q('cost_usd')}) "
            "VALUES (%s, %s, %s)",
            [_task_pk(task.pk), tokens, cost],
        )


def _column(model: Any, field: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(field).column)


def _task_pk(pk: Any) -> Any:
    return Task._meta.get_field("id").get_db_prep_value(pk, connection)
