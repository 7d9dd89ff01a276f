"""The coming herd: fires per minute over the next hours, as `kairos preview --histogram`
counts them, over the schedules of the view.

Counting decodes every schedule (about 130 µs each: 130 s at a million, docs/benchmarks.md), so
it runs on a thread of its own, only when a page asks for it, and its result is kept for
`REFRESH` or ten times as long as the count took, whichever is longer: a console showing the
herd of a million schedules spends at most a tenth of a core on it. Schedules that share a
calendar are counted once (`count_fires`), and the same budget bounds the work.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kairos.core.errors import KairosError
from kairos.core.preview_histogram import Histogram, count_fires
from kairos.core.schedule import Schedule
from kairos.services.console.view import ConsoleView

logger = logging.getLogger(__name__)

REFRESH = timedelta(minutes=5)
HORIZON = timedelta(hours=6)


@dataclass(frozen=True)
class HerdResult:
    counted_at: datetime
    histogram: Histogram | None
    error: str | None = None
    took: timedelta = timedelta(0)

    def stale(self, now: datetime) -> bool:
        return now - self.counted_at >= max(REFRESH, self.took * 10)


class ComingHerd:
    def __init__(self, view: ConsoleView) -> None:
        self._view = view
        self._lock = threading.Lock()
        self._result: HerdResult | None = None
        self._counting = False

    def latest(self, now: datetime) -> HerdResult | None:
        """The last count (`None` before the first), and a new count started if it is old."""
        with self._lock:
            stale = self._result is None or self._result.stale(now)
            if stale and not self._counting:
                self._counting = True
                threading.Thread(target=self._count, args=(now,), daemon=True).start()
            return self._result

    def _count(self, now: datetime) -> None:
        started = time.monotonic()
        try:
            histogram = count_fires(self._schedules(), now, now + HORIZON)
            result = HerdResult(now, histogram, took=timedelta(seconds=time.monotonic() - started))
        except KairosError as error:
            result = HerdResult(now, None, str(error))
        with self._lock:
            self._result = result
            self._counting = False

    def _schedules(self) -> list[Schedule]:
        with self._view.connection() as db:
            rows = db.execute("SELECT definition FROM schedules WHERE paused = 0")
            return [Schedule.model_validate_json(definition) for (definition,) in rows]


def herd_document(result: HerdResult | None) -> dict[str, object]:
    if result is None:
        return {"state": "counting"}
    if result.histogram is None:
        counted_at = result.counted_at.isoformat()
        return {"state": "failed", "counted_at": counted_at, "error": result.error}
    histogram = result.histogram
    return {
        "state": "counted",
        "counted_at": result.counted_at.isoformat(),
        "from": histogram.start.isoformat(),
        "to": histogram.end.isoformat(),
        "schedules": histogram.counted,
        "minutes": {
            datetime.fromtimestamp(minute * 60, UTC).isoformat(): load.fires
            for minute, load in sorted(histogram.minutes.items())
        },
    }
