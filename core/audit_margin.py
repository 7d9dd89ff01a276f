"""How long before its window an audit starts reading the runs, run-events and dead-letter topics.

Those topics are stamped with the broker's append time, so the records of a window are found by
time (`offsets_for_times`) instead of by reading every partition from its beginning. What the
audit needs of them is every record about an occurrence whose nominal instant is in the window,
and the earliest such a record can be appended is its fire:

- at its due instant (the nominal one, plus its jitter) less the ticker's clock lead: a ticker
  refuses to fire on a clock ahead of the broker's by more than `max_clock_ahead_ms` (1 s by
  default), and the audit itself calls a fire more than `--early-tolerance` before its due
  instant early. `CLOCK_MARGIN` covers both with room to spare;
- with `roll: previous_business_day`, up to `LONGEST_ROLL_DAYS` days before its nominal instant,
  at the same wall time (a daylight-saving change moves that by an hour at most): a history that
  names the roll anywhere adds those days and one more.

Everything else about an occurrence comes after: a skip is written when the ticker decides it,
which is not before its due instant either, and run events, re-runs and retries follow the fire.

The limit, stated in docs/audit.md: a fire appended more than the margin before its nominal
instant (possible only from a ticker that breaks its own rules) is not read by a windowed audit
of its window; `--whole-history` reads every record.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from kairos.core.audit_report import DEFAULT_EARLY_TOLERANCE
from kairos.core.calendar_rules import LONGEST_ROLL_DAYS
from kairos.core.schedule import Schedule
from kairos.core.schedule_calendars import RollPolicy

CLOCK_MARGIN = timedelta(minutes=5)


def read_margin(
    definitions: Iterable[Schedule | None], early_tolerance: timedelta = DEFAULT_EARLY_TOLERANCE
) -> timedelta:
    """How long before a window's start the fires and run events of its occurrences may have
    been appended, under `definitions` (every version the window's schedules had)."""
    margin = max(CLOCK_MARGIN, 2 * early_tolerance)
    if any(d is not None and d.roll is RollPolicy.PREVIOUS_BUSINESS_DAY for d in definitions):
        margin += timedelta(days=LONGEST_ROLL_DAYS + 1)
    return margin
