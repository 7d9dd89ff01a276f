"""Staying out of the group while the state directory's file system is full.

A ticker whose stores cannot write fails every assignment it takes: it rejoins, takes
partitions, fails, rejoins, and each round moves partitions of every other ticker too (measured
by the reliability suite's `ticker-disk-full`: 14 rebalances in 60 s, runs up to 23 s late). So
it does not ask for partitions until the file system has room again, and the other tickers hold
them steadily meanwhile.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

logger = logging.getLogger(__name__)

ROOM_BYTES = 64 * 2**20
"""Free bytes the state directory's file system needs before the ticker takes partitions: room
for RocksDB to flush and compact stores of a few hundred thousand schedules each."""
REPORT_EVERY_S = 60.0
CHECK_EVERY_S = 5.0
"""How often a ticker kept out of the group by a full state directory looks again."""


class StateRoom:
    def __init__(self, state_dir: Path, instance: str, room_bytes: int = ROOM_BYTES) -> None:
        self.state_dir = state_dir
        self.instance = instance
        self.room_bytes = room_bytes
        self._reported_at: float | None = None

    def enough(self) -> bool:
        """True when the file system has room; otherwise says so, at most once a minute."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.state_dir).free
        if free >= self.room_bytes:
            if self._reported_at is not None:
                logger.warning("instance=%s state directory has room again", self.instance)
                self._reported_at = None
            return True
        now = time.monotonic()
        if self._reported_at is None or now - self._reported_at >= REPORT_EVERY_S:
            self._reported_at = now
            logger.error(
                "instance=%s state directory %s has %d MiB free, less than the %d MiB its "
                "stores need: taking no partitions until there is room (free space, or give "
                "--state-dir a larger disk); the other tickers hold them meanwhile",
                self.instance,
                self.state_dir,
                free >> 20,
                self.room_bytes >> 20,
            )
        return False
