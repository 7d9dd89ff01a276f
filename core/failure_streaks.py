"""`pause_on_failure`: how many of a schedule's latest runs failed in a row, as its ticker sees.

The ticker that fires a schedule follows the run events of the runs that ended (succeeded, or
dead-lettered after their last attempt) and keeps, per schedule, the outcomes of its latest runs
fired under the definition in force. Only runs fired under that definition count: a change (a
resume included) starts the count again. "In a row" is in the order of the runs' nominal
instants, not of the events' arrival, since executors end runs in parallel. Re-runs are not
counted: their nominal instants are in the past of the definition.

What the tracker cannot know it does not count: it counts the runs it saw fired, so after a
take-over or a restart the runs fired before are not counted, and the pause comes later than N
failures, never earlier. A run still running (retrying) ends a streak counted back past it.

Pure: the ticker feeds it what it fired and what ended, and asks what reached its limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kairos.core.lru import LruCache

REMEMBERED_SCHEDULES = 100_000
"""Schedules whose streak is kept: the least recently touched are forgotten past it (their
count starts again, the safe direction)."""
_SLACK = 32
"""Runs kept beyond a schedule's limit: those still running when later ones end."""


class _Pending:
    """The outcome of a run fired and not ended yet."""


PENDING = _Pending()


@dataclass(frozen=True, slots=True)
class StreakReached:
    """A schedule whose latest `failures` runs under `version` failed; `reason` is the last's."""

    schedule_id: str
    version: int
    failures: int
    reason: str


@dataclass(slots=True)
class _Streak:
    version: int
    runs: dict[datetime, str | _Pending | None] = field(default_factory=dict)
    """Nominal instant of each latest run fired -> the failure's reason, `None` for a success,
    or `PENDING`."""

    def in_a_row(self) -> list[str]:
        """The reasons of the failed runs in a row, latest first, counted back from the latest
        ended run to a success or a run not ended yet."""
        fired = sorted(self.runs, reverse=True)
        ended = [instant for instant in fired if self.runs[instant] is not PENDING]
        if not ended:
            return []
        reasons = []
        for instant in fired[fired.index(ended[0]) :]:
            outcome = self.runs[instant]
            if not isinstance(outcome, str):
                break
            reasons.append(outcome)
        return reasons


class FailureStreaks:
    """The latest runs each schedule fired under its definition in force, and how they ended."""

    def __init__(self, remembered: int = REMEMBERED_SCHEDULES) -> None:
        self._streaks: LruCache[str, _Streak] = LruCache(remembered)

    def fired(self, schedule_id: str, version: int, nominal: datetime, limit: int) -> None:
        """The ticker fired the run of `nominal` under the definition at `version`."""
        streak = self._streaks.get(schedule_id)
        if streak is None or streak.version != version:
            streak = self._streaks.put(schedule_id, _Streak(version))
        streak.runs[nominal] = PENDING
        if len(streak.runs) > limit + _SLACK:
            del streak.runs[min(streak.runs)]

    def ended(
        self, schedule_id: str, version: int, limit: int, nominal: datetime, failure: str | None
    ) -> StreakReached | None:
        """A run of `schedule_id` ended (`failure`: its reason, `None` if it succeeded); the
        streak when it reached `limit` failures in a row under the definition at `version`.

        A run this tracker did not see fired under that version is not counted."""
        streak = self._streaks.get(schedule_id)
        if streak is None or streak.version != version or nominal not in streak.runs:
            return None
        streak.runs[nominal] = failure
        reasons = streak.in_a_row()
        if len(reasons) < limit:
            return None
        return StreakReached(schedule_id, version, len(reasons), reasons[0])

    def counts(self, schedule_id: str) -> bool:
        """Whether the tracker saw a run of `schedule_id` fired: only then are its outcomes
        counted (and worth decoding)."""
        return self._streaks.get(schedule_id) is not None

    def in_a_row(self, schedule_id: str, version: int) -> int:
        """How many of the latest runs under `version` failed in a row (0 when unknown)."""
        streak = self._streaks.get(schedule_id)
        if streak is None or streak.version != version:
            return 0
        return len(streak.in_a_row())
