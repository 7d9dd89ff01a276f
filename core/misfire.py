"""What the misfire policy and the catch-up window make of an occurrence decided late.

Pure: docs/defaults.md ("Late occurrences") states the rules for users. An occurrence decided
more than `MISFIRE_GRACE` after its fire instant was missed (downtime, failover): `all` fires it
late, `skip` records it skipped, `latest` fires only the most recent of a backlog. One older
than `catchup_window` is skipped whatever the policy.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kairos.core.schedule import MisfirePolicy, Schedule

MISFIRE_GRACE = timedelta(seconds=60)
"""How late an occurrence may be decided and still count as on time (Quartz uses the same)."""

_MISSED = "missed (misfire policy skip)"
_SUPERSEDED = "superseded by a later missed occurrence (misfire policy latest)"
_TOO_LATE = "missed by more than catchup_window"


def is_misfire_reason(reason: str | None) -> bool:
    """Whether a recorded skip's reason is one of these rules' (not a calendar's)."""
    return reason is not None and reason.startswith((_MISSED, _SUPERSEDED, _TOO_LATE))


def misfire_reason(
    schedule: Schedule,
    *,
    planned_at: datetime,
    fire_at: datetime,
    following_at: datetime | None,
    until: datetime,
    now: datetime,
) -> str | None:
    # `planned_at`: the nominal instant, or where a calendar moved the occurrence, so that a
    # roll over a long weekend is not taken for an occurrence missed by days.
    window = schedule.catchup_window
    if window is not None and now - planned_at > window:
        return f"{_TOO_LATE} {window}"
    if now - fire_at <= MISFIRE_GRACE:
        return None
    if schedule.misfire is MisfirePolicy.SKIP:
        return _MISSED
    if (
        schedule.misfire is MisfirePolicy.LATEST
        and following_at is not None
        and following_at <= until
    ):
        return _SUPERSEDED
    return None
