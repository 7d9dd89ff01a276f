"""Preparing upcoming fires while the main thread waits on the broker.

A steady load leaves a ticker no idle time, so its fires are decided and encoded at the moment
they are due, where a herd's were prepared in idle time and cost a third as much at the fire
(docs/benchmarks.md, "Issue #19"). Yet each transaction's main thread waits on the broker three
times (the records' acknowledgements, the offsets, the commit: `FiringTransactions.send`) with
the interpreter's lock released. A second thread prepares the coming fires then
(`prepare_upcoming`, as idle time does), on another core.

The preparer runs only inside `waiting()`, which the main thread enters around its blocking
calls, and `waiting()` returns only once the preparer has stopped, after the schedule it was
preparing. Inside the window the main thread only waits on the broker and builds the offsets'
metadata, which reads the stores' counts and next due instants and moves nothing the preparer
reads (`FiringTransactions.waiting` states the rule); the stores and caches move after it. A
preparation stale by the time of its fire (its state replaced since) is never used, as in idle
time: what was prepared is reused only for that very state (`OwnedPartition.decided_ahead`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0005
"""How long a thread holding the interpreter's lock keeps it from one that wants it. Python's
default, 5 ms, would add up to 5 ms to each return from a broker call while the preparer runs:
three a transaction."""


def shorten_switch_interval() -> None:
    """Make the ticker's process hand the interpreter's lock over within `SWITCH_INTERVAL_S`
    (process-wide, so the ticker's process sets it, not each preparer)."""
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))


CLOSE_TIMEOUT_S = 5.0
"""How long closing waits for the schedule in hand (tens of microseconds, unless it hangs)."""

Prepare = Callable[[Callable[[], bool]], object]
"""Prepares upcoming fires, asking `keep_going()` before each schedule."""


class WaitPreparer:
    """A thread that prepares upcoming fires while the main thread waits on the broker."""

    def __init__(self, prepare: Prepare, name: str) -> None:
        self._prepare = prepare
        self._lock = threading.Condition()
        self._open = False
        """Whether the main thread is inside `waiting()` (read without the lock: one bool)."""
        self._window = 0
        """How many windows were opened: the preparer runs at most once in each."""
        self._parked = True
        """Whether the preparer is between preparations (it clears it as it takes a window)."""
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Let the preparer run while the caller waits on the broker; stopped before it returns."""
        with self._lock:
            self._window += 1
            self._open = True
            self._lock.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._open = False
                self._lock.wait_for(lambda: self._parked or not self._thread.is_alive())

    def close(self) -> None:
        """Stop the thread; it finishes the schedule it was preparing."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            # The stores it reads are about to close: say so rather than fail obscurely later.
            logger.error("the preparer did not stop within %.0fs", CLOSE_TIMEOUT_S)

    def _keep_going(self) -> bool:
        return self._open and not self._closed

    def _run(self) -> None:
        try:
            self._serve_windows()
        finally:
            # However the thread ends, a main thread closing a window must not wait for it.
            with self._lock:
                self._parked = True
                self._lock.notify_all()

    def _serve_windows(self) -> None:
        seen = 0
        while True:
            with self._lock:
                self._parked = True
                self._lock.notify_all()
                while not self._closed and (not self._open or self._window == seen):
                    self._lock.wait()
                if self._closed:
                    return
                seen = self._window
                self._parked = False
            try:
                self._prepare(self._keep_going)
            except Exception:
                # Preparing is only an optimisation: a fire decides what was not prepared.
                logger.exception("preparing upcoming fires while waiting on the broker failed")
