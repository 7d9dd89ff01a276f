"""The executor's gate for runs that wait for their upstream periods.

A run whose schedule names upstream schedules carries the periods it waits for, as the ticker
that fired it resolved them (`kairos.core.upstream_wait.resolve`), and is claimed held
(`kairos.streams.dedupe.upstream_waits`). Each sweep first judges the runs awaiting the periods
that succeeded since the last (the store's news, any executor's), then takes the held runs
checked longest ago, and asks the store whether a run of each period succeeded;
`kairos.core.upstream_wait.judge` says what follows. So a release follows its upstream's success
at the next sweep however many runs other teams hold, and the round ends the waits that cannot
go on. Executors read no schedule (team code runs on them): what a run waits for comes
from the run.

Upstream success is what this dedupe store recorded: upstream and downstream must run on
executors sharing one store (every executor of a deployment does by default), and a period
whose run was pruned (`--dedupe-retention`) no longer counts as succeeded.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from kairos.core.schedule_dependencies import UpstreamTimeout
from kairos.core.upstream_wait import Judgement, Resolution, Verdict, judge
from kairos.streams.dedupe.base import DedupeStore, EventKind, WaitingRun
from kairos.streams.wire.codec import Codec
from kairos.streams.wire.records import read_run_requested, upstream_periods_of

logger = logging.getLogger(__name__)

SWEEP_BATCH = 200
"""Held runs read from the store at a time, those checked longest ago first."""

SWEEP_BUDGET_S = 0.25
"""How long a sweep (once a second, beside the reaping) may judge batches: what it leaves
waits for the next sweep, so a herd of held runs never stalls the executor's loop."""


class UpstreamGate:
    """Releases held runs whose upstream periods succeeded; ends those that cannot wait."""

    def __init__(self, store: DedupeStore, codec: Codec, instance: str) -> None:
        self._store = store
        self._codec = codec
        self._instance = instance

    def sweep(self, now: datetime) -> None:
        """Judge the runs awaiting news, then held runs in turn, `SWEEP_BATCH` at a time, each
        once, for up to `SWEEP_BUDGET_S` (news first taken is always judged)."""
        succeeded: dict[tuple[str, datetime], bool] = {}
        judged: set[str] = set()
        ends_at = time.monotonic() + SWEEP_BUDGET_S
        news = self._store.take_upstream_news()
        for position, period in enumerate(news):
            if not self._judge_awaiting(period, now, succeeded, judged, ends_at):
                self._store.keep_upstream_news(news[position:])  # the next sweep goes on
                return
        while time.monotonic() < ends_at:
            runs = [r for r in self._store.waiting_for_upstream(now, SWEEP_BATCH)
                    if r.run_id not in judged]  # fmt: skip
            self._judge_batch(runs, now, succeeded, judged)
            if len(runs) < SWEEP_BATCH:
                return

    def _judge_awaiting(
        self,
        period: tuple[str, datetime],
        now: datetime,
        succeeded: dict[tuple[str, datetime], bool],
        judged: set[str],
        ends_at: float,
    ) -> bool:
        """Judge every run awaiting `period`; False when the time ran out first."""
        after = ""
        while True:
            runs = self._store.awaiting(period, after, SWEEP_BATCH)
            self._judge_batch([r for r in runs if r.run_id not in judged], now, succeeded, judged)
            if len(runs) < SWEEP_BATCH:
                return True
            after = runs[-1].run_id
            if time.monotonic() >= ends_at:
                return False

    def _judge_batch(
        self,
        runs: list[WaitingRun],
        now: datetime,
        succeeded: dict[tuple[str, datetime], bool],
        judged: set[str],
    ) -> None:
        released = []
        for run in runs:
            judged.add(run.run_id)
            judgement = self._judge(run, now, succeeded)
            if judgement.verdict is Verdict.RELEASE:
                released.append(run)
            elif judgement.verdict is not Verdict.WAIT:
                self._end(run, judgement, now)
        for run_id in self._store.release_waiting(released, now, self._instance):
            logger.info("run %s released: its upstream periods succeeded", run_id)

    def _end(self, run: WaitingRun, judgement: Judgement, now: datetime) -> None:
        assert judgement.reason is not None
        skipped = judgement.verdict is Verdict.SKIP
        kind = EventKind.SKIPPED if skipped else EventKind.DEAD_LETTERED
        if self._store.end_waiting(run, kind, judgement.reason, now, self._instance):
            logger.warning("run %s %s: %s", run.run_id, kind.value, judgement.reason)

    def _judge(
        self, run: WaitingRun, now: datetime, succeeded: dict[tuple[str, datetime], bool]
    ) -> Judgement:
        """`succeeded` remembers, for one sweep, what the store said of each period: a herd of
        runs waiting for one settlement asks once."""
        # Admission read these fields before the claim: a held run's record is valid.
        record = read_run_requested(self._codec.decode(run.value))
        periods = []
        for period in upstream_periods_of(record):
            done = False
            if period.resolution is Resolution.MATCHED and period.period_at is not None:
                key = (period.schedule_id, period.period_at)
                if key not in succeeded:
                    succeeded[key] = self._store.period_succeeded(*key)
                done = succeeded[key]
            periods.append((period, done))
        return judge(periods, run.until, UpstreamTimeout(record.upstream_timeout), now)
