"""How far before its window an audit reads: the clock margin, and the longest backward roll."""

from __future__ import annotations

from datetime import timedelta

from kairos.core.audit_margin import CLOCK_MARGIN, read_margin
from kairos.core.reruns import CLOCK_GRACE
from kairos.core.schedule import Schedule
from kairos.core.schedule_calendars import RollPolicy


def _rolling(policy: RollPolicy) -> Schedule:
    return Schedule(id="ops.close", cron="0 18 * * *", exclude=["nyse"], roll=policy)


def test_the_clock_margin_covers_a_tolerance_and_a_ticker_clock_ahead() -> None:
    assert read_margin([]) == CLOCK_MARGIN == timedelta(minutes=5)
    assert read_margin([None, _rolling(RollPolicy.NEXT_BUSINESS_DAY)]) == CLOCK_MARGIN
    # A tolerance wider than the margin widens it: a fire inside the tolerance is on time.
    assert read_margin([], timedelta(minutes=4)) == timedelta(minutes=8)


def test_a_roll_to_the_previous_business_day_anywhere_in_the_history_adds_fifteen_days() -> None:
    history = [Schedule(id="ops.close", cron="0 * * * *"), None]
    history.append(_rolling(RollPolicy.PREVIOUS_BUSINESS_DAY))
    assert read_margin(history) == CLOCK_MARGIN + timedelta(days=15)


def test_the_margin_covers_a_rerun_request_reaching_past_its_append_time() -> None:
    # A request may name occurrences up to CLOCK_GRACE after it was appended (a publisher's
    # clock ahead): their runs are read only if the margin reaches back that far.
    assert CLOCK_MARGIN >= CLOCK_GRACE
