"""Team quotas on the ticker: each team's use of a partition, and the verdict on a change.

The rules are `kairos.core.quotas`'. A partition's use is counted from its committed store, then
moved by each committed transaction. At a million schedules a count takes seconds a partition,
which the first change a quota judges would wait for, and every fire of the turn with it: so
once a team is limited, the ticker counts in its idle time, a slice per look at the clock
(`count_quota_use`), and a deployment without quotas never pays it. A count in slices reads the
store as it was when the count began (a RocksDB iterator keeps that snapshot,
`StoreScan`) and adds the commits made since when it ends; a change judged before the count
ends finishes it then. The changes of the open transaction are counted beside it
(`TransactionWork.use_changes`), so a change is judged after the ones before it in the same
transaction, and an aborted transaction leaves the count as the store is.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kairos.core.firing import ScheduleState
from kairos.core.quotas import NO_USE, Trigger, Use, schedule_use
from kairos.streams.state.changelog import quota_use_from_stored
from kairos.streams.state.state_store import PartitionStore, StateStoreError, StoreScan
from kairos.streams.wire.codec import Codecs

logger = logging.getLogger(__name__)

COUNT_SLICE = 256
"""Definitions counted between two looks at the clock (about 5 ms at 18 us each)."""

RERUN_WINDOW = timedelta(minutes=1)
"""The re-runs a team's fires-a-minute quota counts: those fired in the last minute."""


def state_use(state: ScheduleState | None) -> tuple[str, Use] | None:
    """The team a held state counts against, and what it takes; `None`: none or no owner."""
    if state is None or state.schedule.owner is None:
        return None
    return state.schedule.owner, schedule_use(Trigger.of(state.schedule))


@dataclass
class _CountUnderWay:
    """A count begun and not finished: the store as it was then, and the commits since."""

    scan: StoreScan
    by_team: dict[str, Use] = field(default_factory=dict)
    """What the scan has summed so far."""
    since: dict[str, Use] = field(default_factory=dict)
    """What the transactions committed since the scan began changed (it cannot see them)."""
    schedules: int = 0
    slices: int = 0
    spent_s: float = 0.0


def _add(into: dict[str, Use], changes: dict[str, Use]) -> None:
    for team, change in changes.items():
        into[team] = into.get(team, NO_USE) + change


class PartitionUse:
    """Each team's use of one partition, as its committed store holds it."""

    def __init__(self, partition: int, store: Callable[[], PartitionStore], codecs: Codecs) -> None:
        self._partition = partition
        self._store = store
        """The partition's store as it is now: a cold restore replaces the one it had."""
        self._codecs = codecs
        self._by_team: dict[str, Use] | None = None
        self._counting: _CountUnderWay | None = None

    @property
    def counted(self) -> bool:
        """Whether the count is whole (moved by commits, not read from the store again)."""
        return self._by_team is not None

    def of(self, team: str) -> Use:
        """The team's use; a partition not counted yet is counted whole first (a count under
        way is finished): a verdict never goes without a count."""
        while self._by_team is None:
            self.count_for(math.inf)
        return self._by_team.get(team, NO_USE)

    def count_for(self, budget_s: float) -> None:
        """Count on for about `budget_s`, `COUNT_SLICE` definitions at least (0 counts exactly
        one slice); a count begun is resumed, as the store was when it began.

        A store that cannot be read, or is closed under the count, raises the retryable
        `StateStoreError`: the ticker rejoins and counts again, rather than judge without a count.
        """
        if self._by_team is not None:
            return
        started = time.monotonic()
        count = self._counting
        try:
            if count is None:
                count = self._counting = _CountUnderWay(self._store().definitions())
            while not self._count_slice(count):
                if time.monotonic() - started >= budget_s:
                    count.spent_s += time.monotonic() - started
                    return
        except Exception as failure:
            self._abandon()
            reason = failure.reason if isinstance(failure, StateStoreError) else str(failure)
            raise StateStoreError(
                self._store().path,
                f"cannot be read to count partition {self._partition}'s quota use ({reason})",
            ) from failure
        count.spent_s += time.monotonic() - started
        self._counting = None
        self._by_team = count.by_team
        _add(self._by_team, count.since)
        logger.info(
            "quota use of partition %d counted: %d schedules, %d teams, %.2fs in %d slices",
            self._partition,
            count.schedules,
            len(self._by_team),
            count.spent_s,
            count.slices,
        )

    def committed(self, changes: dict[str, Use]) -> None:
        """Move the count by what a committed transaction changed: the count's, or the commits
        a count under way adds when it ends (nothing before a count begins)."""
        if self._by_team is not None:
            _add(self._by_team, changes)
        elif self._counting is not None:
            _add(self._counting.since, changes)

    def recount(self) -> None:
        """Count again from the store (a schedule was quarantined: what it took cannot be read
        from a state that could not be decoded); a count under way begins again too."""
        self._abandon()
        self._by_team = None

    def _abandon(self) -> None:
        if self._counting is not None:
            self._counting.scan.end()
            self._counting = None

    def _count_slice(self, count: _CountUnderWay) -> bool:
        """Count the next `COUNT_SLICE` definitions; whether the scan is at its end."""
        count.slices += 1
        by_team = count.by_team
        for _, definition in zip(range(COUNT_SLICE), count.scan, strict=False):
            count.schedules += 1
            counted = self._decoded(definition)
            if counted is not None:
                team, use = counted
                by_team[team] = by_team.get(team, NO_USE) + use
        return not count.scan.running

    def _decoded(self, definition: bytes) -> tuple[str, Use] | None:
        try:
            return quota_use_from_stored(self._codecs, definition)
        except Exception:
            # Undecodable: it is quarantined when it falls due, and takes nothing meanwhile.
            return None


def count_quota_use(uses: Iterable[PartitionUse], budget_s: float) -> float:
    """Count the partitions not counted yet, a slice at a time, for about `budget_s` (one slice
    past it at most); the time spent."""
    started = time.monotonic()
    for use in uses:
        left_s = budget_s - (time.monotonic() - started)
        if left_s <= 0:
            break
        use.count_for(left_s)
    return time.monotonic() - started


class RecentReruns:
    """The re-runs this ticker fired in the last minute, per partition and team: what a request
    judged against its owner's fires a minute finds already used (`rerun_quota_refusal`).

    Counted when a request is taken, before its transaction commits: a transaction aborted
    leaves them counted, which refuses more, never less. Kept in memory: a ticker taking a
    partition over starts from none (docs/teams.md says what holds then).
    """

    def __init__(self) -> None:
        self._fired: dict[tuple[int, str], deque[tuple[datetime, int]]] = {}

    def fired(self, partition: int, team: str, now: datetime) -> int:
        """The team's re-runs fired on the partition in the minute up to `now`."""
        window = self._fired.get((partition, team))
        if window is None:
            return 0
        while window and window[0][0] <= now - RERUN_WINDOW:
            window.popleft()
        if not window:
            del self._fired[(partition, team)]
            return 0
        return sum(runs for _, runs in window)

    def add(self, partition: int, team: str, now: datetime, runs: int) -> None:
        self._fired.setdefault((partition, team), deque()).append((now, runs))
