"""The executor's attempt side: the worker pool, the lease keeper, the shell jobs' watchdog.

Attempts run on a pool of worker threads; a keeper thread renews their leases; a watchdog
process kills a shell job's process group if the executor dies. `stop` ends them in the order
the shutdown needs: attempts first (each records a failed attempt, retried elsewhere), then the
threads that served them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from kairos.services.executor.attempts import (
    AttemptRunner,
    Clock,
    InFlightAttempts,
    LeaseKeeper,
    ShellJobGuard,
)
from kairos.services.executor.handlers import Handlers
from kairos.services.executor.metrics import ExecutorMetrics
from kairos.services.executor.session import ExecutorSession
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.executor.watchdog import JobWatchdog
from kairos.streams.dedupe.base import Lease
from kairos.streams.wire.codec import Codec

_STOPPED_ATTEMPTS_WAIT_S = 10.0


class AttemptWorkers:
    def __init__(
        self,
        session: ExecutorSession,
        settings: ExecutorSettings,
        *,
        codec: Codec,
        handlers: Handlers,
        metrics: ExecutorMetrics,
        clock: Clock,
    ) -> None:
        self.attempts = InFlightAttempts()
        self._watchdog = JobWatchdog()
        shell_jobs = ShellJobGuard(self._watchdog, settings.lease)
        self._keeper = LeaseKeeper(session.store, self.attempts, settings.lease, clock, shell_jobs)
        self._runner = AttemptRunner(
            store=session.store,
            settings=settings,
            codec=codec,
            handlers=handlers,
            metrics=metrics,
            attempts=self.attempts,
            job_producer=session.job_producer,
            clock=clock,
            shell_jobs=shell_jobs,
        )
        self._pool = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="attempt")
        self._keeper.start()

    def start(self, lease: Lease, held_until: float) -> None:
        """Run the leased attempt on a worker thread."""
        attempt = self.attempts.add(lease, held_until)
        self._pool.submit(self._runner.run, attempt)

    def stop(self, reason: str) -> None:
        """Stop the attempts still running, wait a little for their outcomes, end the threads."""
        for attempt in self.attempts.snapshot():
            attempt.request_stop(reason)
        waited_until = time.monotonic() + _STOPPED_ATTEMPTS_WAIT_S
        while len(self.attempts) and time.monotonic() < waited_until:
            time.sleep(0.05)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._keeper.close()
        self._watchdog.close()
