"""fulltext/query.py's ``time_window``: the tool's ``since`` / ``until`` as one window (issue 32)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC).timestamp()
DAY = 86400.0


@pytest.fixture
def q(phr):
    return phr.module("fulltext.query")


def test_nothing_given_is_no_window(q):
    assert q.time_window(None, None, NOW) is None
    assert q.time_window("", "  ", NOW) is None


def test_plain_dates_are_local_days_and_until_includes_its_day(q):
    start = datetime(2026, 11, 20).timestamp()
    assert q.time_window("2026-11-20", "2026-11-20", NOW) == (start, start + DAY)
    assert q.time_window("2026-11-20", None, NOW) == (start, float("inf"))
    assert q.time_window(None, "2026-11-20", NOW) == (0.0, start + DAY)


def test_datetimes_are_their_instant(q):
    assert q.time_window("2026-11-20T10:30:00+00:00", "2026-11-21T00:00Z", NOW) == (
        datetime(2026, 11, 20, 10, 30, tzinfo=UTC).timestamp(),
        datetime(2026, 11, 21, tzinfo=UTC).timestamp(),
    )
    assert q.time_window("2026-11-20 10:30", None, NOW)[0] == datetime(2026, 11, 20, 10, 30).timestamp()


def test_spans_count_back_from_now(q):
    assert q.time_window("7d", None, NOW) == (NOW - 7 * DAY, float("inf"))
    assert q.time_window("2W", "1d", NOW) == (NOW - 14 * DAY, NOW - DAY)


@pytest.mark.parametrize(
    ("since", "until", "named"),
    [
        ("last week", None, "since"),
        ("2026-13-01", None, "since"),
        ("7", None, "since"),
        ("-7d", None, "since"),
        (None, "tomorrow", "until"),
        (None, 7, "until"),
        ("2026-11-21", "2026-11-20", "since"),  # an empty window is a mistake, not "nothing found"
        ("1d", "7d", "since"),
    ],
)
def test_bad_values_name_the_bound_and_the_form(q, since, until, named):
    with pytest.raises(q.TimeBoundError) as raised:
        q.time_window(since, until, NOW)
    message = str(raised.value)
    assert message.startswith(f"{named}: ")
    assert message.endswith("(use a date like 2026-11-20 or a span like 7d or 2w)")
