"""The schedule model: the contract every producer app writes, and the schedules-file parser.

Field names are part of the public contract (the Avro `ScheduleDefinition` mirrors them); the
semantics of each field are stated in docs/defaults.md.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal
from zoneinfo import ZoneInfo

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from kairos.core import limits
from kairos.core import schedule_dependencies as dependencies
from kairos.core import schedule_lifecycle as lifecycle
from kairos.core.cron import parse_cron
from kairos.core.durations import format_duration, read_duration
from kairos.core.file_entries import EntriesInvalidError, EntryFile, EntryValidationError
from kairos.core.identifiers import SCHEDULE_ID_PATTERN, Identifier
from kairos.core.pools import Pool
from kairos.core.schedule_calendars import (
    BlackoutAction,
    CalendarIds,
    RollPolicy,
    calendar_field_problem,
)
from kairos.core.schedule_text import listed_entries
from kairos.core.suggestions import model_suggestion
from kairos.core.zones import legacy_fixed_zone_warning, zone_problem


class MisfirePolicy(StrEnum):
    """What happens to occurrences found late, for example after the scheduler was down."""

    ALL = "all"
    """Every missed occurrence fires, late: late, never lost (the default)."""
    LATEST = "latest"
    """Only the most recent missed occurrence fires; the older ones are recorded as skipped."""
    SKIP = "skip"
    """No missed occurrence fires; each is recorded as skipped, and the next on-time one runs."""


class OverlapPolicy(StrEnum):
    """What an executor does when a run is due while the previous run of the schedule is running."""

    ALLOW = "allow"
    """Start the new run beside the running one, as cron does (the default)."""
    SKIP = "skip"
    """Do not start the new run; record it as skipped (never silently dropped)."""
    QUEUE = "queue"
    """Start the new run as soon as the previous one ends; runs keep their order."""
    REPLACE = "replace"
    """Cancel the running run, then start the new one."""


class DstGapPolicy(StrEnum):
    """A fixed-time cron job whose wall time does not exist that night (spring forward)."""

    RUN_AT_TRANSITION = "run_at_transition"
    """Run once, at the first instant after the jump (cronie; the default)."""
    SKIP = "skip"
    """No run that day."""


class DstRepeatPolicy(StrEnum):
    """A fixed-time cron job whose wall time occurs twice that night (fall back)."""

    FIRST = "first"
    """Run once, in the first pass (cronie; the default)."""
    BOTH = "both"
    """Run in both passes."""
    LAST = "last"
    """Run once, in the second pass."""


DURATIONS_IN_MS: dict[str, bool] = {"durations_in_ms": True}
"""Validation context for records whose durations are integer milliseconds (Avro `long`s):
`Schedule.model_validate(record, context=DURATIONS_IN_MS)`. Elsewhere a bare number is refused,
since `90` could mean seconds or minutes."""


def _aware_utc(value: datetime) -> datetime:
    offset = value.utcoffset()
    if offset is None:
        raise ValueError(
            f"{value.isoformat()} has no UTC offset, so it is not an instant; "
            "add one, such as '2027-03-14T07:00:00Z' or '2027-03-14T03:00:00-04:00'"
        )
    try:
        utc = value if value.tzinfo is UTC else (value - offset).replace(tzinfo=UTC)
    except OverflowError:
        utc = None
    if utc is None or not limits.EARLIEST_INSTANT <= utc < limits.LATEST_INSTANT:
        raise ValueError(
            f"{value.isoformat()} is outside the instants a schedule may name, "
            f"{limits.INSTANT_RANGE}; pick an instant in that range"
        )
    if utc.microsecond % 1000:
        # Instants travel as Avro timestamp-millis; a finer one would change on the way and
        # with it the run ids derived from it.
        raise ValueError(
            f"{value.isoformat()} is more precise than a millisecond; "
            "round it to whole milliseconds"
        )
    return utc


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than zero")
    return value


def _at_most(longest: timedelta, why: str) -> AfterValidator:
    def check(value: timedelta) -> timedelta:
        if value > longest:
            raise ValueError(
                f"{format_duration(value)} is longer than the maximum, "
                f"{format_duration(longest)} ({why}); shorten it"
            )
        return value

    return AfterValidator(check)


Duration = Annotated[
    timedelta,
    BeforeValidator(read_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
"""A duration read by `parse_duration` (or from integer milliseconds, in the `DURATIONS_IN_MS`
context); serialised to JSON in its canonical short form."""

PositiveDuration = Annotated[Duration, AfterValidator(_positive)]

Instant = Annotated[datetime, AfterValidator(_aware_utc)]
"""An aware datetime with millisecond precision, normalised to UTC; naive ones are refused.

Within `limits.EARLIEST_INSTANT` and `limits.LATEST_INSTANT`."""


def _not_too_often(value: timedelta) -> timedelta:
    if value < limits.SHORTEST_EVERY:
        raise ValueError(
            f"{format_duration(value)} is shorter than the minimum, "
            f"{format_duration(limits.SHORTEST_EVERY)}; lengthen it"
        )
    return value


Interval = Annotated[
    PositiveDuration,
    AfterValidator(_not_too_often),
    _at_most(limits.LONGEST_EVERY, "about ten years; for a rarer occurrence use 'at'"),
]
Jitter = Annotated[Duration, _at_most(limits.LONGEST_EVERY, "the longest 'every'")]
CatchupWindow = Annotated[
    Duration, _at_most(limits.LONGEST_CATCHUP_WINDOW, "a longer window is no limit: leave it unset")
]
Timeout = Annotated[PositiveDuration, _at_most(limits.LONGEST_TIMEOUT, "per attempt")]
RetryBackoff = Annotated[
    Duration, _at_most(limits.LONGEST_RETRY_BACKOFF, "waits between attempts are capped at it")
]


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        # JSON's "\ud800" escape reads as a lone surrogate, which Avro's UTF-8 cannot carry.
        bad = value[error.start]
        raise ValueError(
            f"contains {bad!r} at position {error.start}, half of a UTF-16 pair "
            "that UTF-8 cannot carry; remove it"
        ) from None
    return value


Text = Annotated[str, AfterValidator(_utf8)]
"""A string every record can carry: UTF-8 encodable."""


def _valid_zone(value: str) -> str:
    problem = zone_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


ZoneName = Annotated[str, AfterValidator(_valid_zone)]
"""An IANA zone name that `zoneinfo` can load."""


def _rule(field: str, problem: str) -> PydanticCustomError:
    # Cross-field rules are checked on the whole model, where pydantic has no field location;
    # the field travels in the context so that `_describe` can still name it.
    return PydanticCustomError(
        "schedule_rule", "{field}: {problem}", {"field": field, "problem": problem}
    )


class JobSpec(BaseModel):
    """What to run: a `kind` and its parameters, opaque to the calendar.

    Example: `{"kind": "shell", "command": "echo hi"}`. Executors interpret the extra fields.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: Text

    @field_validator("kind")
    @classmethod
    def _kind_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the kind of job, such as 'shell' or 'http'")
        return value


class Schedule(BaseModel):
    """One schedule. Exactly one trigger (`cron`, `at` or `every`) is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Identifier
    """Unique within a deployment; 1–200 characters of `[A-Za-z0-9._:/-]`."""
    cron: str | None = None
    """Five fields or a macro, read on the wall clock of `timezone`."""
    at: Instant | None = None
    """One instant."""
    every: Interval | None = None
    """A fixed interval of elapsed time, anchored at `start_at` (which it requires)."""
    timezone: ZoneName = "UTC"
    """IANA zone name whose wall clock `cron` is read on; also used to display fires."""
    start_at: Instant | None = None
    """No fire before this instant; a fire exactly at it counts."""
    end_at: Instant | None = None
    """No fire after this instant; a fire exactly at it counts."""
    jitter: Jitter | None = None
    """Maximum delay added to each run, the same for the same run every time."""
    misfire: MisfirePolicy = MisfirePolicy.ALL
    catchup_window: CatchupWindow | None = None
    """Occurrences found later than this are skipped whatever `misfire` says; `None`: no limit."""
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    dst_gap: DstGapPolicy = DstGapPolicy.RUN_AT_TRANSITION
    """Fixed-time cron jobs only; wildcard jobs and `every` follow real time."""
    dst_repeat: DstRepeatPolicy = DstRepeatPolicy.FIRST
    """Fixed-time cron jobs only; wildcard jobs and `every` follow real time."""
    paused: bool = False
    """A paused schedule keeps its calendar but starts no runs."""
    pause_until: Instant | None = None
    """Occurrences before this instant are skipped (recorded); the schedule resumes by itself."""
    exclude: CalendarIds = ()
    """Calendars whose holidays skip an occurrence (or, with `roll`, whose business days it
    moves to); they also count the business days of `business_day`."""
    roll: RollPolicy | None = None
    business_day: int | None = None
    """The n-th business day of each month (negative: from its end), at the cron's times."""
    blackout: CalendarIds = ()
    """Calendars whose windows skip an occurrence, or defer it (`blackout_action`)."""
    blackout_action: BlackoutAction = BlackoutAction.SKIP
    job: JobSpec = Field(default_factory=lambda: JobSpec(kind="noop"))
    max_attempts: int = Field(default=3, ge=1)
    """Attempts per run, the first included."""
    timeout: Timeout = timedelta(hours=1)
    """Per attempt."""
    retry_backoff: RetryBackoff = timedelta(seconds=10)
    """Delay before the first retry; it doubles for each further retry."""
    owner: Text | None = None
    """The team that answers for the schedule."""
    labels: dict[Text, Text] = Field(default_factory=dict)
    pool: Pool | None = None
    """The executors' pool that runs it (`kairos.core.pools`); `None`: the default pool."""
    description: Text | None = None
    deadline: lifecycle.Deadline | None = None
    pause_on_failure: lifecycle.FailuresInARow | None = None
    """Failed runs in a row after which the schedule pauses itself; `None`: never."""
    max_runs: lifecycle.RunCount | None = None
    after_last_run: lifecycle.AfterLastRun = lifecycle.AfterLastRun.PAUSE
    upstream: tuple[dependencies.Upstream, ...] = ()
    """Schedules whose matching period must succeed before a run starts."""
    upstream_wait: dependencies.UpstreamWait = dependencies.DEFAULT_UPSTREAM_WAIT
    """How long after its nominal instant a run waits for its upstream periods."""
    upstream_timeout: dependencies.UpstreamTimeout = dependencies.UpstreamTimeout.FAIL
    downstream_teams: tuple[Text, ...] = ()
    """Other teams whose schedules may wait for this one (its own team always may)."""

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parse_cron(value)
        # One spelling per expression, so that schedules sharing it share one compiled calendar
        # and, interned, one string.
        return sys.intern(" ".join(value.split()))

    @field_validator("max_attempts")
    @classmethod
    def _bounded_attempts(cls, value: int) -> int:
        if value > limits.MAX_ATTEMPTS:
            raise ValueError(
                f"{value} is more than the maximum, {limits.MAX_ATTEMPTS} "
                "(with waits capped at an hour, that many attempts retry for "
                "days); lower it"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Schedule:
        triggers = [name for name in ("cron", "at", "every") if getattr(self, name) is not None]
        if not triggers:
            raise _rule("cron", "no trigger; set exactly one of 'cron', 'at' or 'every'")
        if len(triggers) > 1:
            raise _rule(
                triggers[-1],
                f"a schedule has exactly one trigger, but "
                f"{' and '.join(map(repr, triggers))} are set; keep one",
            )
        if self.every is not None and self.start_at is None:
            raise _rule(
                "start_at",
                "'every' counts from start_at, so set start_at "
                "(for example '2027-01-01T00:00:00Z')",
            )
        self._check_jitter()
        problem = (
            calendar_field_problem(self)
            or lifecycle.lifecycle_field_problem(self)
            or dependencies.dependency_field_problem(self)
        )
        if problem is not None:
            raise _rule(*problem)
        if self.start_at is not None and self.end_at is not None and self.end_at <= self.start_at:
            raise _rule(
                "end_at",
                f"end_at {self.end_at.isoformat()} is not after start_at "
                f"{self.start_at.isoformat()}; move it later or drop it",
            )
        return self

    def _check_jitter(self) -> None:
        if self.jitter is None:
            return
        if self.every is not None:
            longest, why = self.every, "the schedule's 'every', so runs keep their order"
        else:
            longest, why = limits.LONGEST_CALENDAR_JITTER, "for 'cron' and 'at' schedules"
        if self.jitter > longest:
            raise _rule(
                "jitter",
                f"{format_duration(self.jitter)} is longer than the maximum, "
                f"{format_duration(longest)} ({why}); shorten it",
            )

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def zone_warning(self) -> str | None:
        """Why the zone is valid but probably not what was meant (`EST`), or `None`."""
        return legacy_fixed_zone_warning(self.timezone)


class ScheduleValidationError(EntryValidationError):
    """One problem with one schedule: which schedule, which field, what is wrong.

    `schedule_id` is `None` when the schedule has no usable id; then `index` (its position in
    the file, from 0) identifies it. `field` is a dotted path such as `cron` or `job.kind`.
    """

    entry = "schedule"

    def __init__(
        self, *, schedule_id: str | None, index: int | None, field: str, problem: str
    ) -> None:
        super().__init__(schedule_id, index=index, field=field, problem=problem)

    @property
    def schedule_id(self) -> str | None:
        return self.entry_id


class SchedulesInvalidError(EntriesInvalidError[ScheduleValidationError]):
    """Every problem found in one or more schedules; `errors` lists them all."""

    entries = "schedules"


def parse_schedule(data: object, *, index: int | None = None) -> Schedule:
    """Validate one schedule given as a mapping.

    Raises `SchedulesInvalidError` listing every problem; `index` is its position in a file.
    """
    return _SCHEDULES.parse(data, index)


def load_schedules(text: str, fmt: Literal["yaml", "json"]) -> list[Schedule]:
    """Parse a schedules file's text, `{"schedules": [ {...}, ... ]}`, in YAML or JSON.

    Every problem in every schedule is collected into one `SchedulesInvalidError`, duplicate ids
    included. A file that cannot be read as YAML/JSON of that shape raises
    `SchedulesFileFormatError`. Reading the file is the caller's job, so this stays pure.
    """
    return _SCHEDULES.load(listed_entries(text, fmt, "schedules"))


def _problem(
    schedule_id: str | None, index: int | None, field: str, problem: str
) -> ScheduleValidationError:
    return ScheduleValidationError(
        schedule_id=schedule_id, index=index, field=field, problem=problem
    )


def _describe(detail: ErrorDetails) -> tuple[str, str]:
    # A key can hold a lone surrogate (see `_utf8`); the path must still print.
    field = (
        ".".join(str(part) for part in detail["loc"])
        .encode("utf-8", "backslashreplace")
        .decode("utf-8")
    )
    context = detail.get("ctx") or {}
    kind = detail["type"]
    if kind == "schedule_rule":
        return str(context["field"]), str(context["problem"])
    if kind == "value_error" and "error" in context:
        return field, str(context["error"])
    if kind == "missing":
        return field, "is required"
    suggestion = model_suggestion(Schedule, detail)
    if kind == "extra_forbidden":
        known = ", ".join(Schedule.model_fields) if len(detail["loc"]) == 1 else ""
        return field, "unknown field" + (f"; the fields are {known}" if known else "") + suggestion
    if kind == "model_type" and not detail["loc"]:
        return "", "each schedule must be a mapping of fields"
    shown = detail.get("input")
    got = f" (got {shown!r})" if isinstance(shown, str | int | float | bool) else ""
    return field, f"{detail['msg']}{got}{suggestion}"


_SCHEDULES = EntryFile(
    Schedule.model_validate, SCHEDULE_ID_PATTERN, _describe, _problem, SchedulesInvalidError
)
