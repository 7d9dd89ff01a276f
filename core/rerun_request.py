"""What a re-run request asks for, and how far a ticker got with one: plain data, no rules.

The rules (which occurrences a request names, when it is done) are `kairos.core.reruns`'s; these
records live apart so that `kairos.core.firing`, whose decisions and states carry them, does not
import the rules that build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from kairos.core.schedule import OverlapPolicy


class RerunKind(StrEnum):
    TRIGGER = "trigger"
    """One run of the schedule's job for the instant `start` (`kairos schedules trigger`)."""
    BACKFILL = "backfill"
    """A run for every occurrence from `start` through `end` (`kairos schedules backfill`)."""


@dataclass(frozen=True, slots=True)
class RerunRequest:
    """A request, published on the schedule's own partition, to run the schedule's job again.

    `start` and `end` bound the occurrences, both included; a trigger's are equal. `overlap`
    replaces the schedule's overlap policy for these runs (`None`: the schedule's).
    """

    request_id: str
    schedule_id: str
    kind: RerunKind
    start: datetime
    end: datetime
    overlap: OverlapPolicy | None
    requested_by: str
    requested_at: datetime
    reason: str | None


@dataclass(frozen=True, slots=True)
class RerunProgress:
    """A request the ticker has fired part of: `fired_through` is its last occurrence fired."""

    request_id: str
    fired_through: datetime
