"""Due times and the cadences refused (plain Python, no database)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from automations.cadence import Cadence, CadenceError

NOW = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)  # a Friday


def test_the_next_five_due_times_of_a_cron_follow_its_time_zone():
    weekdays_at_nine = Cadence(cron="0 9 * * 1-5", timezone="Europe/Paris")
    upcoming = weekdays_at_nine.upcoming(NOW, 5)
    # 09:00 in Paris: 08:00 UTC before the clocks change on 29 March, 07:00 after.
    assert upcoming == [
        datetime(2026, 3, 30, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 31, 7, 0, tzinfo=UTC),
        datetime(2026, 4, 1, 7, 0, tzinfo=UTC),
        datetime(2026, 4, 2, 7, 0, tzinfo=UTC),
        datetime(2026, 4, 3, 7, 0, tzinfo=UTC),
    ]


def test_an_interval_counts_from_its_anchor():
    every_hour = Cadence(
        interval_s=3600, anchor=datetime(2026, 3, 27, 9, 30, tzinfo=UTC)
    )
    assert every_hour.next_after(NOW) == datetime(2026, 3, 27, 12, 30, tzinfo=UTC)
    assert every_hour.upcoming(NOW, 2)[1] == datetime(2026, 3, 27, 13, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cadence", "message"),
    [
        (Cadence(cron="0 0 30 2 *"), "never fires"),
        (Cadence(cron="* * * * *"), "fires every 60 s at times, more often than"),
        (Cadence(cron="*/10 * * * * *"), "more often than the minimum interval"),
        (Cadence(cron="every day"), "is not a cron expression"),
        (Cadence(interval_s=30), "Every 30 s is more often than the minimum"),
        (Cadence(), "Give a cron expression or an interval"),
        (Cadence(cron="0 9 * * *", interval_s=3600), "not both"),
        (Cadence(cron="0 9 * * *", timezone="Mars/Olympus"), "Unknown time zone"),
    ],
)
def test_a_cadence_that_never_fires_or_fires_too_often_is_refused(cadence, message):
    with pytest.raises(CadenceError, match=message):
        cadence.validate(min_interval_s=120, now=NOW)


def test_a_cadence_at_the_minimum_is_accepted():
    Cadence(cron="*/2 * * * *").validate(min_interval_s=120, now=NOW)
    Cadence(interval_s=120).validate(min_interval_s=120, now=NOW)


def test_the_latest_due_time_is_found_directly_after_a_long_gap():
    hourly = Cadence(cron="0 * * * *")
    a_year_on = datetime(2027, 3, 27, 12, 34, tzinfo=UTC)
    assert hourly.latest_until(a_year_on) == datetime(2027, 3, 27, 12, 0, tzinfo=UTC)
    on_the_hour = datetime(2027, 3, 27, 12, 0, tzinfo=UTC)
    assert hourly.latest_until(on_the_hour) == on_the_hour
    every_minute = Cadence(interval_s=60, anchor=NOW)
    assert every_minute.latest_until(a_year_on) == a_year_on.replace(second=0)
    assert every_minute.latest_until(datetime(2020, 1, 1, tzinfo=UTC)) is None
