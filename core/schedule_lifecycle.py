"""The schedule fields about a run's life after it fires: deadlines, failure pauses, run limits.

The executors watch `deadline` and `pause_on_failure`; the ticker counts `max_runs` and applies
`after_last_run`. docs/defaults.md states each for users.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from kairos.core.durations import format_duration, read_duration

LONGEST_DEADLINE = timedelta(days=366)
"""A run still not finished a year after its nominal instant is no longer late but lost; and a
bound keeps `nominal + finish_by` within the instants a datetime holds."""

MOST_FAILURES_IN_A_ROW = 1000
"""A longer streak of failures is no signal any more: pause sooner, or leave it off."""

MOST_RUNS = 2**31 - 1
"""`max_runs` travels as an Avro `int`."""


class AfterLastRun(StrEnum):
    """What becomes of a schedule once its `max_runs`-th run has fired."""

    PAUSE = "pause"
    """It stays, paused, with its history (the default): resume it to run again."""
    DELETE = "delete"
    """It is deleted, as `kairos schedules delete` would, so that a one-off does not linger."""


def _positive_and_bounded(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than zero")
    if value > LONGEST_DEADLINE:
        raise ValueError(
            f"{format_duration(value)} is longer than the maximum, "
            f"{format_duration(LONGEST_DEADLINE)}; shorten it"
        )
    return value


DeadlineDuration = Annotated[
    timedelta,
    BeforeValidator(read_duration),
    AfterValidator(_positive_and_bounded),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
"""A duration after a run's nominal instant, longer than zero and at most `LONGEST_DEADLINE`."""


class Deadline(BaseModel):
    """When a run is late, counted from its nominal instant (before jitter): either or both.

    Example: `{"start_by": "10m", "finish_by": "1h"}`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_by: DeadlineDuration | None = None
    """A run whose first attempt has not started by `nominal + start_by` is late."""
    finish_by: DeadlineDuration | None = None
    """A run not succeeded by `nominal + finish_by` is late."""

    @model_validator(mode="after")
    def _ordered(self) -> Deadline:
        if self.start_by is None and self.finish_by is None:
            raise _rule(
                "deadline",
                "names no deadline; set start_by, finish_by or both "
                "(for example deadline: {start_by: 10m, finish_by: 1h}), or drop it",
            )
        if (
            self.start_by is not None
            and self.finish_by is not None
            and self.finish_by < self.start_by
        ):
            raise _rule(
                "deadline.finish_by",
                f"{format_duration(self.finish_by)} is earlier than start_by "
                f"{format_duration(self.start_by)}, and a run cannot finish before it starts; "
                "make finish_by at least start_by",
            )
        return self


def _rule(field: str, problem: str) -> PydanticCustomError:
    # The error type `kairos.core.schedule` reports under the field named in the context.
    return PydanticCustomError(
        "schedule_rule", "{field}: {problem}", {"field": field, "problem": problem}
    )


FailuresInARow = Annotated[int, Field(ge=1, le=MOST_FAILURES_IN_A_ROW)]
RunCount = Annotated[int, Field(ge=1, le=MOST_RUNS)]


class _LifecycleFields(Protocol):
    @property
    def max_runs(self) -> int | None: ...
    @property
    def after_last_run(self) -> AfterLastRun: ...


def lifecycle_field_problem(schedule: _LifecycleFields) -> tuple[str, str] | None:
    """The first (field, problem) among the lifecycle fields' rules, or `None`."""
    if schedule.after_last_run is AfterLastRun.DELETE and schedule.max_runs is None:
        return "after_last_run", (
            "says what happens after the last of max_runs runs, but max_runs is not set; "
            "set it (for example max_runs: 1 for a one-off) or drop after_last_run"
        )
    return None
