"""The executor's graceful shutdown, once `stop` is set (SIGTERM).

1. Take no more work: commit what was claimed and leave the group, so the partitions move to
   the other executors at once.
2. Let running attempts finish within the grace period, leases and events moving.
3. Stop what is left: each records a failed attempt, retried by another executor.
4. Publish the events of the last outcomes, then close.
"""

from __future__ import annotations

import logging
import time

from kairos.services.executor.offsets import OffsetMarks
from kairos.services.executor.session import ExecutorSession
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.executor.turn import ExecutorTurn
from kairos.services.executor.workers import AttemptWorkers

logger = logging.getLogger(__name__)


def shut_down(
    session: ExecutorSession,
    workers: AttemptWorkers,
    marks: OffsetMarks,
    turn: ExecutorTurn,
    settings: ExecutorSettings,
) -> None:
    logger.info(
        "executor instance=%s stopping: %d attempts in flight",
        settings.instance,
        len(workers.attempts),
    )
    marks.commit(session.consumer, force=True)
    session.leave_group()
    deadline = time.monotonic() + settings.shutdown_grace.total_seconds()
    while len(workers.attempts) and time.monotonic() < deadline:
        turn.publish_events()
        time.sleep(settings.poll_interval.total_seconds())
    workers.stop("the executor is shutting down and its grace period ended")
    turn.publish_events()
    session.close()
    logger.info("executor instance=%s stopped", settings.instance)
