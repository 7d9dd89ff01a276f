"""`pause_on_failure`: after N failed runs of a schedule in a row, the schedule pauses itself.

After a run is dead-lettered, the executor reads the schedule's latest definition from the
schedules topic and, when it has `pause_on_failure: N` and is not paused, asks the shared dedupe
store how many of its latest runs failed in a row. At N it publishes a normal `paused` event of
that definition, changed by the executor, with the reason. Only runs fired since the schedule's
latest change count, so resuming it (or any other change) restarts the count.
"""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass
from datetime import datetime

from kairos.core.errors import KairosError
from kairos.streams.dedupe.base import DedupeStore
from kairos.streams.schedule_publisher import ScheduleNotFoundError, SchedulesClient
from kairos.streams.settings import KafkaSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FailedRun:
    schedule_id: str
    reason: str


class FailurePause:
    """Collects dead-lettered runs from any thread; `check` runs on the executor's loop."""

    def __init__(self, kafka: KafkaSettings, store: DedupeStore, instance: str) -> None:
        self._kafka = kafka
        self._store = store
        self._changed_by = f"executor:{instance}"
        self._failed: queue.SimpleQueue[FailedRun] = queue.SimpleQueue()
        self._client: SchedulesClient | None = None

    def failed(self, schedule_id: str, reason: str | None) -> None:
        self._failed.put(FailedRun(schedule_id, reason or "attempts exhausted"))

    def check(self) -> None:
        """Pause each schedule whose failure streak reached its `pause_on_failure`."""
        latest: dict[str, FailedRun] = {}
        while not self._failed.empty():
            run = self._failed.get()
            latest[run.schedule_id] = run
        for run in latest.values():
            try:
                self._check_one(run)
            except KairosError as error:
                # Checked again after the schedule's next failure.
                logger.error("schedule=%s pause_on_failure not checked: %s", run.schedule_id, error)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _check_one(self, run: FailedRun) -> None:
        client = self._schedules()
        try:
            stored = client.get(run.schedule_id)
        except ScheduleNotFoundError:
            return  # deleted since: nothing to pause
        if stored.schedule.paused or stored.schedule.pause_on_failure is None:
            return
        limit = stored.schedule.pause_on_failure
        since: datetime = stored.changed_at
        streak = self._store.failures_in_a_row(run.schedule_id, since, limit)
        if streak < limit:
            logger.info(
                "schedule=%s: %d of %d failed runs in a row", run.schedule_id, streak, limit
            )
            return
        reason = f"paused after {limit} failed runs in a row: {run.reason}"
        client.pause(run.schedule_id, reason=reason)
        logger.warning("schedule=%s %s", run.schedule_id, reason)

    def _schedules(self) -> SchedulesClient:
        if self._client is None:
            self._client = SchedulesClient(self._kafka, changed_by=self._changed_by)
        return self._client
