"""When a schedule is due: cron expressions (croniter) or fixed intervals, in a
time zone. Plain Python: datetimes in, datetimes out."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

#: How many due times the minimum-interval check looks at.
_CHECKED_FIRINGS = 50


class CadenceError(ValueError):
    """A cadence that cannot be used: the message says why, for the form."""


@dataclass(frozen=True)
class Cadence:
    """A cron expression or an interval (exactly one), in a time zone."""

    cron: str = ""
    interval_s: int | None = None
    timezone: str = "UTC"
    #: For an interval: the instant its due times count from.
    anchor: datetime | None = None

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise CadenceError(
                f"Unknown time zone {self.timezone!r}: use an IANA name such as "
                "Europe/Paris or UTC."
            ) from exc

    def next_after(self, at: datetime) -> datetime:
        """The first due time strictly after ``at`` (aware, in UTC)."""
        if self.interval_s:
            anchor = self.anchor or at
            if at < anchor:
                return anchor.astimezone(UTC)
            steps = int((at - anchor).total_seconds() // self.interval_s) + 1
            return (anchor + timedelta(seconds=steps * self.interval_s)).astimezone(UTC)
        local = at.astimezone(self.zone())
        try:
            found = croniter(self.cron, local).get_next(datetime)
        except CroniterBadDateError as exc:
            raise CadenceError(
                f"The cron expression {self.cron!r} never fires."
            ) from exc
        return found.astimezone(UTC)

    def latest_until(self, at: datetime) -> datetime | None:
        """The last due time at or before ``at`` (None: none before it), found
        directly, however long ago the previous tick was."""
        if self.interval_s:
            anchor = self.anchor or at
            if at < anchor:
                return None
            steps = int((at - anchor).total_seconds() // self.interval_s)
            return (anchor + timedelta(seconds=steps * self.interval_s)).astimezone(UTC)
        # croniter's get_prev is strictly before its start: start a second on.
        local = (at + timedelta(seconds=1)).astimezone(self.zone())
        try:
            found = croniter(self.cron, local).get_prev(datetime)
        except CroniterBadDateError:
            return None
        return found.astimezone(UTC)

    def upcoming(self, after: datetime, count: int = 5) -> list[datetime]:
        """The next ``count`` due times after ``after``."""
        return list(itertools.islice(self.due_times(after), count))

    def due_times(self, after: datetime) -> Iterator[datetime]:
        at = after
        while True:
            at = self.next_after(at)
            yield at

    def validate(self, *, min_interval_s: int, now: datetime) -> None:
        """Refuse a cadence that is not exactly one of the two, names an unknown
        zone, never fires or fires more often than ``min_interval_s``."""
        if bool(self.cron.strip()) == bool(self.interval_s):
            raise CadenceError("Give a cron expression or an interval, not both.")
        self.zone()
        if self.interval_s:
            if self.interval_s < min_interval_s:
                raise CadenceError(
                    f"Every {self.interval_s} s is more often than the minimum "
                    f"interval, {min_interval_s} s (REACH_SCHEDULE_MIN_INTERVAL_S)."
                )
            return
        if not croniter.is_valid(self.cron):
            raise CadenceError(
                f"{self.cron!r} is not a cron expression (five fields: minute hour "
                "day-of-month month day-of-week, as in '0 9 * * 1-5')."
            )
        try:
            times = [now, *self.upcoming(now, _CHECKED_FIRINGS)]
        except (CroniterBadCronError, CroniterBadDateError) as exc:
            raise CadenceError(
                f"The cron expression {self.cron!r} never fires."
            ) from exc
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times[1:])]
        if gaps and min(gaps) < min_interval_s:
            raise CadenceError(
                f"{self.cron!r} fires every {int(min(gaps))} s at times, more often "
                f"than the minimum interval, {min_interval_s} s "
                "(REACH_SCHEDULE_MIN_INTERVAL_S)."
            )
