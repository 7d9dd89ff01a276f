"""Team quotas on the ticker: each team's use of a partition, and the verdict on a change.

The rules are `kairos.core.quotas`'. A partition's use is counted from its committed store in
one pass, at the first change a quota must judge there (a deployment without quotas never pays
it), then moved by each committed transaction. The changes of the open transaction are counted
beside it (`TransactionWork.use_changes`), so a change is judged after the ones before it in
the same transaction, and an aborted transaction leaves the count as the store is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kairos.core.firing import ScheduleState
from kairos.core.quotas import NO_USE, Use, schedule_use
from kairos.streams.changelog import quota_use_from_stored
from kairos.streams.codec import Codecs
from kairos.streams.state_store import PartitionStore, StateStoreError

logger = logging.getLogger(__name__)


def state_use(state: ScheduleState | None) -> tuple[str, Use] | None:
    """The team a held state counts against, and what it takes; `None`: none or no owner."""
    if state is None or state.schedule.owner is None:
        return None
    return state.schedule.owner, schedule_use(state.schedule.every)


class PartitionUse:
    """Each team's use of one partition, as its committed store holds it."""

    def __init__(self, partition: int, store: Callable[[], PartitionStore], codecs: Codecs) -> None:
        self._partition = partition
        self._store = store
        """The partition's store as it is now: a cold restore replaces the one it had."""
        self._codecs = codecs
        self._by_team: dict[str, Use] | None = None

    def of(self, team: str) -> Use:
        if self._by_team is None:
            self._by_team = self._count()
        return self._by_team.get(team, NO_USE)

    def committed(self, changes: dict[str, Use]) -> None:
        """Move the count by what a committed transaction changed (nothing before the count)."""
        if self._by_team is None:
            return
        for team, change in changes.items():
            self._by_team[team] = self._by_team.get(team, NO_USE) + change

    def recount(self) -> None:
        """Count again from the store at the next verdict (a schedule was quarantined: what it
        took cannot be read from a state that could not be decoded)."""
        self._by_team = None

    def _decoded(self, definition: bytes) -> tuple[str, Use] | None:
        try:
            return quota_use_from_stored(self._codecs, definition)
        except Exception:
            # Undecodable: it is quarantined when it falls due, and takes nothing meanwhile.
            return None

    def _count(self) -> dict[str, Use]:
        started = time.monotonic()
        by_team: dict[str, Use] = {}
        store = self._store()
        try:
            for definition in store.definitions():
                counted = self._decoded(definition)
                if counted is not None:
                    team, use = counted
                    by_team[team] = by_team.get(team, NO_USE) + use
        except Exception as failure:
            # Retryable: the ticker rejoins and counts again, rather than judge without a count.
            raise StateStoreError(
                store.path,
                f"cannot be read to count partition {self._partition}'s quota use ({failure})",
            ) from failure
        logger.info(
            "quota use of partition %d counted: %d teams in %.2fs",
            self._partition,
            len(by_team),
            time.monotonic() - started,
        )
        return by_team
