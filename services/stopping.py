"""How every Kairos service is asked to stop: SIGTERM (Kubernetes, systemd) or Ctrl-C."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType


def stop_on_signals(logger: logging.Logger, stopping: str) -> threading.Event:
    """An event set when SIGTERM or SIGINT arrives, logged as `signal N: <stopping>`.

    Call it from the main thread (Python delivers signals there only); the service's loop
    watches the event and winds down the way `stopping` says.
    """
    stop = threading.Event()

    def request_stop(signum: int, _: FrameType | None) -> None:
        logger.info("signal %d: %s", signum, stopping)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop
