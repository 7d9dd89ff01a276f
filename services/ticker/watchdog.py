"""Keeping the ticker loop alive: a watchdog for hung transaction calls, the rebuild backoff."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from kairos.services.ticker.transaction import FiringTransactions

logger = logging.getLogger(__name__)

EXIT_STUCK = 75
"""Exit code (EX_TEMPFAIL) when librdkafka hangs in a transaction call: restart the ticker."""


class TransactionWatchdog:
    """Exits the process if a transaction call never returns, so a supervisor restarts it.

    librdkafka's `send_offsets_to_transaction` can block past its timeout, forever, when the
    group coordinator goes away mid-call (librdkafka issues 5456 and 5511). No Python code can
    interrupt it; the stores hold only committed state, so a restart loses nothing.
    """

    def __init__(
        self,
        instance: str,
        limit_s: float,
        transactions: Callable[[], FiringTransactions | None],
    ) -> None:
        self._instance = instance
        self._limit_s = limit_s
        self._transactions = transactions

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            transactions = self._transactions()
            busy_since = transactions.busy_since if transactions is not None else None
            if busy_since is not None and time.monotonic() - busy_since > self._limit_s:
                logger.critical(
                    "instance=%s a transaction call has not returned for %.0fs (librdkafka "
                    "#5456); exiting with code %d for a supervisor to restart this ticker",
                    self._instance,
                    self._limit_s,
                    EXIT_STUCK,
                )
                logging.shutdown()
                os._exit(EXIT_STUCK)


class Backoff:
    """Exponential backoff between attempts, from 0.2 s up to 5 s."""

    def __init__(self) -> None:
        self.delay_s = 0.2

    def next(self) -> float:
        delay = self.delay_s
        self.delay_s = min(5.0, self.delay_s * 2)
        return delay

    def reset(self) -> None:
        self.delay_s = 0.2
