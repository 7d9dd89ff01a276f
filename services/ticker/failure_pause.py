"""`pause_on_failure` on the ticker: the schedule pauses itself after N failed runs in a row.

The ticker that owns a schedule holds its definition, fires its runs, and follows the run events of
the runs that ended (`kairos.streams.readers.run_outcomes`). When the latest N runs fired under the
definition in force were dead-lettered (`kairos.core.failure_streaks`), it publishes in its next
transaction a normal `paused` change of that definition, as `kairos schedules pause` would, marked
for the version it pauses (`kairos-if-version`): an owner's edit appended in between stands. In
signed mode, that change is taken unsigned when the ticker that reads it back finds the same streak
(`earned`), as its `after_last_run` is; a team's forged pause is refused.

Executors hold no key and read no schedule for it: a dead-lettered run costs them nothing more
than its run event.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kairos.core.failure_streaks import FailureStreaks
from kairos.core.firing import ScheduleState
from kairos.services.ticker.clients import RunOutcomeSource
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.work import TransactionWork
from kairos.streams.kafka.partitioner import partition_for

logger = logging.getLogger(__name__)


class FailurePauses:
    """The streaks of the schedules this ticker fires, and the pauses they earned."""

    def __init__(self, partitions: int, streaks: FailureStreaks | None = None) -> None:
        self._partitions = partitions
        self.streaks = streaks or FailureStreaks()
        self._feed: RunOutcomeSource | None = None

    def start(self, feed: RunOutcomeSource) -> None:
        self._feed = feed

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def fired(self, work: TransactionWork) -> None:
        """Note each run fired of a schedule with `pause_on_failure` (after the commit)."""
        for decision, state, _ in work.runs:
            limit = state.schedule.pause_on_failure
            if decision.rerun is None and limit is not None:
                self.streaks.fired(state.schedule_id, state.version, decision.nominal, limit)

    def add_pauses(self, work: TransactionWork, owned: Mapping[int, OwnedPartition]) -> None:
        """Take the outcomes published since the last turn; add to `work` the pause of each
        schedule whose streak reached its `pause_on_failure`."""
        if self._feed is None:
            return
        # A herd's run events pass here: a schedule none of whose runs this ticker fired is
        # passed over without a look at its state.
        for outcome in self._feed.take(self.streaks.counts):
            partition = partition_for(outcome.schedule_id, self._partitions)
            state = self._held(owned, outcome.schedule_id)
            limit = None if state is None else state.schedule.pause_on_failure
            if state is None or limit is None or state.paused:
                continue
            reached = self.streaks.ended(
                outcome.schedule_id, state.version, limit, outcome.nominal_at, outcome.failure
            )
            if reached is None:
                streak = self.streaks.in_a_row(outcome.schedule_id, state.version)
                if outcome.failure is not None:
                    logger.info(
                        "schedule=%s: %d of %d failed runs in a row",
                        outcome.schedule_id,
                        streak,
                        limit,
                    )
                continue
            reason = f"paused after {reached.failures} failed runs in a row: {reached.reason}"
            work.failure_pauses.append((partition, state, reason))
            logger.warning("schedule=%s %s", outcome.schedule_id, reason)

    def earned(self, state: ScheduleState) -> bool:
        """Whether the schedule's latest runs under `state`'s definition reached its limit."""
        limit = state.schedule.pause_on_failure
        return (
            limit is not None and self.streaks.in_a_row(state.schedule_id, state.version) >= limit
        )

    def _held(self, owned: Mapping[int, OwnedPartition], schedule_id: str) -> ScheduleState | None:
        partition = owned.get(partition_for(schedule_id, self._partitions))
        return None if partition is None else partition.state(schedule_id)
