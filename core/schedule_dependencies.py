"""The schedule fields about waiting for other schedules: upstreams, how periods match, the wait.

A schedule names upstream schedules (`upstream`); a run of it starts only once the matching
period of each upstream has succeeded, and gives up `upstream_wait` after its nominal instant
(`upstream_timeout`: it fails or is skipped, with the reason). Another team's schedule may be
named only if that schedule grants it (`downstream_teams`). docs/defaults.md states the rules;
`kairos.core.dependencies` works them out.
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
    PlainSerializer,
)

from kairos.core.durations import format_duration, read_duration
from kairos.core.identifiers import Identifier

MOST_UPSTREAMS = 16
"""A run that waits on more periods than this is a pipeline, better split into stages."""

LONGEST_UPSTREAM_WAIT = timedelta(days=7)
"""A week covers a settlement held over a long weekend; a run held longer is lost, not late."""

DEFAULT_UPSTREAM_WAIT = timedelta(hours=6)


class PeriodMatch(StrEnum):
    """Which period of an upstream a run waits for."""

    LATEST_BEFORE = "latest_before"
    """The upstream's latest period ending at or before this run's nominal instant (the
    default: it matches any pair of triggers)."""
    SAME_INSTANT = "same_instant"
    """The upstream's period ending at this run's nominal instant; an occurrence the upstream
    does not share waits for nothing and is skipped with the reason."""
    SAME_LOCAL_DATE = "same_local_date"
    """The upstream's last period ending on this run's local date, on this schedule's clock."""


class UpstreamTimeout(StrEnum):
    """What becomes of a run whose upstream period has not succeeded by its wait's end."""

    FAIL = "fail"
    """It fails, with the reason: its failure is notified and counts for `pause_on_failure`."""
    SKIP = "skip"
    """It is recorded skipped, with the reason."""


class Upstream(BaseModel):
    """One schedule this one waits for, and how their periods match.

    Example: `{"schedule": "settlement/close", "match": "same_local_date"}`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schedule: Identifier
    match: PeriodMatch = PeriodMatch.LATEST_BEFORE


def _bounded_wait(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than zero")
    if value > LONGEST_UPSTREAM_WAIT:
        raise ValueError(
            f"{format_duration(value)} is longer than the maximum, "
            f"{format_duration(LONGEST_UPSTREAM_WAIT)}; shorten it"
        )
    return value


UpstreamWait = Annotated[
    timedelta,
    BeforeValidator(read_duration),
    AfterValidator(_bounded_wait),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
"""How long after its nominal instant a run may wait for its upstream periods."""


class _DependencyFields(Protocol):
    @property
    def upstream(self) -> tuple[Upstream, ...]: ...


def dependency_field_problem(schedule: _DependencyFields) -> tuple[str, str] | None:
    """The first (field, problem) among the dependency fields' own rules, or `None`.

    What needs other schedules (existence, grants, cycles, matching) is
    `kairos.core.dependencies`'s, and so is a schedule naming itself (a cycle of one): these
    rules hold for a definition whatever its id, since records of one shape share a validation.
    """
    named = [upstream.schedule for upstream in schedule.upstream]
    twice = sorted({name for name in named if named.count(name) > 1})
    if twice:
        return "upstream", f"names {', '.join(twice)} more than once; keep one entry each"
    if len(named) > MOST_UPSTREAMS:
        return "upstream", (
            f"names {len(named)} schedules, more than {MOST_UPSTREAMS}; wait for a stage that "
            "itself waits for the rest"
        )
    return None
