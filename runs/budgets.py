"""Daily budgets: what a user may spend per day before a new message is refused.

A user's budget is their :class:`~runs.models.DailyBudget` row, else the default
row (no user), else none. The day is the calendar day in ``TIME_ZONE``; what
counts is the cost and the tokens (estimated ones too) of the user's runs
created that day, imported traces aside. A run whose model has no price adds
tokens but no cost. The check is one aggregate query per new message: no step
of a run reads it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Q, Sum
from django.utils import timezone

from engine.pricing import format_usd
from infra.durations import duration_words
from infra.errors import ErrorKind, ServiceError
from runs.models import DailyBudget, Task


@dataclass(frozen=True)
class BudgetStatus:
    """A user's budget today: the limits, what was spent, when it resets."""

    max_cost_usd: float | None
    max_tokens: int | None
    spent_cost_usd: float
    spent_tokens: int
    resets_at: dt.datetime

    @property
    def cost_exceeded(self) -> bool:
        return self.max_cost_usd is not None and (
            self.spent_cost_usd >= self.max_cost_usd
        )

    @property
    def tokens_exceeded(self) -> bool:
        return self.max_tokens is not None and self.spent_tokens >= self.max_tokens

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


def budget_status(*, user: Any, now: dt.datetime | None = None) -> BudgetStatus | None:
    """The user's budget today, or None when no budget applies to them."""
    budget = budget_of(user)
    if budget is None or (budget.max_cost_usd is None and budget.max_tokens is None):
        return None
    start, end = day_bounds(now)
    spent = Task.objects.filter(
        owner=user, created_at__gte=start, origin__isnull=True
    ).aggregate(cost=Sum("cost_usd"), tokens=Sum("total_tokens"))
    return BudgetStatus(
        max_cost_usd=budget.max_cost_usd,
        max_tokens=budget.max_tokens,
        spent_cost_usd=float(spent["cost"] or 0.0),
        spent_tokens=int(spent["tokens"] or 0),
        resets_at=end,
    )


def budget_check(*, user: Any, now: dt.datetime | None = None) -> BudgetStatus | None:
    """Raise :class:`DailyBudgetExceeded` when the user may not start a run now;
    return their budget's status (None when none applies)."""
    status = budget_status(user=user, now=now)
    if status is not None and status.exceeded:
        raise DailyBudgetExceeded(status)
    return status
