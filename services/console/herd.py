"""The coming herd: fires per minute over the next hours, as `kairos preview --histogram`
counts them, over the schedules of the view.

Counting decodes every schedule (about 110 µs each: 110 s at a million, docs/benchmarks.md), so
it runs in a process of its own, only when a page asks for it, and its result is kept for
`REFRESH` or ten times as long as the count took, whichever is longer: a console showing the
herd of a million schedules spends at most a tenth of a core on it. Schedules that share a
calendar are counted once (`count_fires`), and the same budget bounds the work.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from typing import TYPE_CHECKING

from kairos.core.errors import KairosError
from kairos.core.preview_histogram import Histogram, count_fires
from kairos.core.schedule import Schedule
from kairos.services.console.view import ConsoleView

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess


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
    """Counts in a process of its own: a count holds the interpreter for minutes at a million
    schedules, and pages served meanwhile would wait for it (measured: seven times slower)."""

    def __init__(self, view: ConsoleView) -> None:
        self._view = view
        self._lock = threading.Lock()
        self._result: HerdResult | None = None
        self._counting: BaseProcess | None = None

    def latest(self, now: datetime) -> HerdResult | None:
        """The last count (`None` before the first), and a new count started if it is old."""
        with self._lock:
            stale = self._result is None or self._result.stale(now)
            if stale and self._counting is None:
                # Spawned, not forked: the console's threads (the web server's, librdkafka's)
                # must not be copied mid-operation into the child.
                receiving, sending = _SPAWN.Pipe(duplex=False)
                self._counting = _SPAWN.Process(
                    target=_count_into, args=(sending, self._view.url, now), daemon=True
                )
                self._counting.start()
                sending.close()
                threading.Thread(target=self._receive, args=(receiving,), daemon=True).start()
            return self._result

    def close(self) -> None:
        """Stop a count under way: a console stopping does not wait minutes for it."""
        with self._lock:
            if self._counting is not None:
                self._counting.terminate()

    def _receive(self, receiving: Connection) -> None:
        try:
            result: HerdResult = receiving.recv()
        except EOFError:
            result = HerdResult(datetime.now(UTC), None, "the count's process ended without one")
        with self._lock:
            self._result = result
            if self._counting is not None:
                self._counting.join(timeout=5)
            self._counting = None


_SPAWN = get_context("spawn")


def _count_into(sending: Connection, view_url: str, now: datetime) -> None:
    sending.send(count_herd(view_url, now))


def count_herd(view_url: str, now: datetime) -> HerdResult:
    """The herd of the view's active schedules from `now` over `HORIZON` (in the child)."""
    started = time.monotonic()
    view = ConsoleView(view_url)
    try:
        with view.connection() as db:
            rows = db.execute("SELECT definition FROM schedules WHERE paused = 0")
            schedules = [Schedule.model_validate_json(definition) for (definition,) in rows]
        histogram = count_fires(schedules, now, now + HORIZON)
    except KairosError as error:
        return HerdResult(now, None, str(error))
    return HerdResult(now, histogram, took=timedelta(seconds=time.monotonic() - started))


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
