"""Run identity: one readable id per occurrence, `<schedule id>@<nominal instant in UTC>`.

`settlement-report@2027-03-14T07:00:00Z`. The instant has second precision; a nominal instant
with a fraction of a second (an `every` schedule with a millisecond interval, or anchored at a
`start_at` with milliseconds) carries `.mmm`. Schedules keep instants to the millisecond, so
`.ffffff` (an instant that is not a whole millisecond) only appears for instants from elsewhere.
Each instant has exactly one spelling, so equal occurrences give equal ids in every process and
version, and `parse_run_id` inverts `run_id` exactly.

The id depends on nothing but the schedule id and the nominal instant: a schedule deleted and
re-created under the same id gets the same run ids, so an occurrence already fired is recognised
as a duplicate and not fired again (see docs/defaults.md).

A re-run (`kairos schedules trigger`, `backfill`) of the occurrence at an instant carries the
request's id after it: `settlement-report@2027-03-14T07:00:00Z~rerun-nightly-fix`. It differs
from the nominal run id, so executors run it even though the occurrence ran, and it is the same
for every retry of the request, so executors deduplicate a retried request like any redelivery.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache

from kairos.core.errors import KairosError
from kairos.core.identifiers import SCHEDULE_ID_PATTERN

RERUN_MARK = "~rerun-"
"""Between a run id and the id of the re-run request that made it ('~' is in no schedule id)."""

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
_REQUEST_ID_RULE = "1-64 characters of letters, digits and . _ -"

_INSTANT = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{3}(?:\d{3})?))?Z")


class RunIdError(KairosError, ValueError):
    """A run id could not be made or read; `run_id` is the input, `problem` what is wrong."""

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        self.problem = problem
        super().__init__(
            f"invalid run id {run_id!r}: {problem}; run ids look like "
            "'settlement-report@2027-03-14T07:00:00Z'"
        )


@lru_cache(maxsize=4096)
def format_instant(instant: datetime) -> str:
    """The instant in UTC as the run id spells it: `2027-03-14T07:00:00Z`.

    Cached: the schedules of a herd share their nominal instant.
    """
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{instant.isoformat()} is naive; run ids need an aware instant")
    t = instant.astimezone(UTC)
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if t.microsecond == 0:
        return text + "Z"
    if t.microsecond % 1000 == 0:
        return f"{text}.{t.microsecond // 1000:03d}Z"
    return f"{text}.{t.microsecond:06d}Z"


def run_id(schedule_id: str, nominal: datetime) -> str:
    """The id of the occurrence of `schedule_id` at the nominal (pre-jitter) instant `nominal`."""
    return f"{run_id_prefix(schedule_id)}{format_instant(nominal)}"


def run_id_prefix(schedule_id: str) -> str:
    """What every run id of `schedule_id`, re-runs' included, starts with, and no other
    schedule's: schedule ids hold no '@' (`SCHEDULE_ID_PATTERN`)."""
    return f"{schedule_id}@"


class RequestIdError(KairosError, ValueError):
    """A re-run request id that run ids cannot carry."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        super().__init__(
            f"invalid request id {request_id!r}: use {_REQUEST_ID_RULE}, such as "
            "'backfill-2027-03-14' or 'incident-4711'"
        )


def check_request_id(request_id: str) -> str:
    """`request_id` when a run id can carry it, else `RequestIdError`."""
    if not REQUEST_ID_PATTERN.fullmatch(request_id):
        raise RequestIdError(request_id)
    return request_id


def rerun_id(schedule_id: str, nominal: datetime, request_id: str) -> str:
    """The id of the re-run, asked by request `request_id`, of the occurrence at `nominal`."""
    return f"{run_id(schedule_id, nominal)}{RERUN_MARK}{request_id}"


def rerun_request_of(text: str) -> str | None:
    """The re-run request id a run id carries; `None` for a scheduled occurrence's id."""
    _, mark, request_id = text.partition(RERUN_MARK)
    return request_id if mark else None


def parse_run_id(text: str) -> tuple[str, datetime]:
    """Split a run id (a re-run's too) back into its schedule id and nominal instant (UTC)."""
    occurrence, mark, request_id = text.partition(RERUN_MARK)
    if mark and not REQUEST_ID_PATTERN.fullmatch(request_id):
        raise RunIdError(text, f"the re-run request id after {RERUN_MARK!r} is not valid")
    schedule_id, at, instant = occurrence.rpartition("@")
    if not at or not SCHEDULE_ID_PATTERN.fullmatch(schedule_id):
        raise RunIdError(text, "it does not start with a schedule id followed by '@'")
    match = _INSTANT.fullmatch(instant)
    if match is None:
        raise RunIdError(text, "the part after '@' is not an instant like 2027-03-14T07:00:00Z")
    year, month, day, hour, minute, second, fraction = match.groups()
    micro = int(fraction.ljust(6, "0")) if fraction else 0
    try:
        nominal = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=UTC
        )
    except ValueError as error:
        raise RunIdError(text, f"the instant does not exist ({error})") from None
    if format_instant(nominal) != instant:
        raise RunIdError(text, "the instant is not in its canonical spelling")
    return schedule_id, nominal
