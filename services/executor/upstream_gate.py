"""The executor's gate for runs that wait for their upstream periods.

A run whose schedule names upstream schedules carries the periods it waits for, as the ticker
that fired it resolved them (`kairos.core.upstream_wait.resolve`), and is claimed held
(`kairos.streams.dedupe.upstream_waits`). Each sweep takes the held runs checked longest ago and
asks the store whether a run of each period succeeded; `kairos.core.upstream_wait.judge` says
what follows. Executors read no schedule (team code runs on them): what a run waits for comes
from the run.

Upstream success is what this dedupe store recorded: upstream and downstream must run on
executors sharing one store (every executor of a deployment does by default), and a period
whose run was pruned (`--dedupe-retention`) no longer counts as succeeded.
"""

from __future__ import annotations

import logging
from datetime import datetime

from kairos.core.schedule_dependencies import UpstreamTimeout
from kairos.core.upstream_wait import Judgement, Resolution, Verdict, judge
from kairos.streams.dedupe.base import DedupeStore, EventKind, WaitingRun
from kairos.streams.wire.codec import Codec
from kairos.streams.wire.records import read_run_requested, upstream_periods_of

logger = logging.getLogger(__name__)

SWEEP_BATCH = 200
"""Held runs judged per sweep; the rest wait for the next, checked longest ago first."""


class UpstreamGate:
    """Releases held runs whose upstream periods succeeded; ends those that cannot wait."""

    def __init__(self, store: DedupeStore, codec: Codec, instance: str) -> None:
        self._store = store
        self._codec = codec
        self._instance = instance

    def sweep(self, now: datetime) -> None:
        """Judge up to `SWEEP_BATCH` held runs and act on each verdict."""
        for run in self._store.waiting_for_upstream(now, SWEEP_BATCH):
            judgement = self._judge(run, now)
            if judgement.verdict is Verdict.RELEASE:
                if self._store.release_waiting(run.run_id, now):
                    logger.info("run %s released: its upstream periods succeeded", run.run_id)
            elif judgement.verdict is not Verdict.WAIT:
                assert judgement.reason is not None
                skipped = judgement.verdict is Verdict.SKIP
                kind = EventKind.SKIPPED if skipped else EventKind.DEAD_LETTERED
                if self._store.end_waiting(run, kind, judgement.reason, now, self._instance):
                    logger.warning("run %s %s: %s", run.run_id, kind.value, judgement.reason)

    def _judge(self, run: WaitingRun, now: datetime) -> Judgement:
        # Admission read these fields before the claim: a held run's record is valid.
        record = read_run_requested(self._codec.decode(run.value))
        periods = [
            (
                period,
                period.resolution is Resolution.MATCHED
                and period.period_at is not None
                and self._store.period_succeeded(period.schedule_id, period.period_at),
            )
            for period in upstream_periods_of(record)
        ]
        return judge(periods, run.until, UpstreamTimeout(record.upstream_timeout), now)
