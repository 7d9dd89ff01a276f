"""Idle time before the next fire: how long it lasts, and preparing what upcoming fires need.

Preparing decodes upcoming schedules' states, decides their next occurrence ahead and encodes
the records it will need, so a herd spends its time sending, not computing (`Ahead`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from kairos.services.ticker.partition import DECODED_AHEAD_MS, OwnedPartition, to_ms
from kairos.services.ticker.transaction import FiringTransactions

logger = logging.getLogger(__name__)

PREPARE_MIN_IDLE_S = 0.02
"""Idle time below which nothing is prepared."""
_PREPARE_SLICE = 256
"""Schedules prepared between two looks at the clock."""


def seconds_until_next_due(owned: Mapping[int, OwnedPartition], now: datetime) -> float:
    """Seconds until the earliest due fire of any owned partition (infinite: none)."""
    nearest: int | None = None
    for partition in owned.values():
        due = partition.store.next_due_ms()
        if due is not None and (nearest is None or due < nearest):
            nearest = due
    if nearest is None:
        return float("inf")
    return max(0.0, (nearest - to_ms(now)) / 1000)


def prepare_upcoming(
    owned: Mapping[int, OwnedPartition],
    transactions: FiringTransactions,
    clock: Callable[[], datetime],
    *,
    budget_s: float,
    horizon_ms: int = DECODED_AHEAD_MS,
    keep_going: Callable[[], bool] = lambda: True,
    lane: str = "idle",
    fair_orders: bool = True,
) -> float:
    """Prepare the fires due within `horizon_ms`, for at most `budget_s` and while
    `keep_going()` (asked before each schedule and each instant); the time spent. `lane`
    names the preparer, whose cursor is resumed; `fair_orders`: order each instant prepared for
    a fair herd too (a sort of the whole instant: idle time's work)."""
    started = time.monotonic()
    now_ms = to_ms(clock())
    horizon = now_ms + horizon_ms
    for partition in owned.values():
        from_ms, position = partition.prepared_cursors.get(lane, (0, 0))
        if from_ms < now_ms:
            from_ms, position = now_ms, 0
        for instant, schedule_ids in partition.store.due_instants(from_ms, horizon):
            if instant > from_ms:
                position = 0
            while position < len(schedule_ids):
                if time.monotonic() - started >= budget_s or not keep_going():
                    partition.prepared_cursors[lane] = (instant, position)
                    return time.monotonic() - started
                for schedule_id in schedule_ids[position : position + _PREPARE_SLICE]:
                    if not keep_going():
                        partition.prepared_cursors[lane] = (instant, position)
                        return time.monotonic() - started
                    _prepare_one(partition, transactions, schedule_id)
                    position += 1
            partition.prepared_cursors[lane] = (instant, len(schedule_ids))
            if fair_orders:
                partition.keep_fair_order(instant, schedule_ids)
    return time.monotonic() - started


WHILE_WAITING_HORIZONS_MS = (1_000, 5_000)
"""How far ahead fires are prepared while a transaction waits on the broker: the next second on
every owned partition first, then the next five. Not the two minutes of idle time: under a
steady load every fire would be held prepared, twice the memory, for no fire sooner."""


BEHIND_MS = 1_000
"""A ticker whose last fires committed this late is behind: it is firing what is due already,
which a preparation of the coming seconds does not reach, and preparing would only take the
interpreter from the loop (measured at 1M every-minute schedules: 13,841 fires/s with it,
16,667/s without; docs/benchmarks.md)."""


def prepare_while_waiting(
    owned: Mapping[int, OwnedPartition],
    transactions: FiringTransactions,
    clock: Callable[[], datetime],
    keep_going: Callable[[], bool],
) -> None:
    """Prepare the fires due soonest while `keep_going()` (`preparer.WaitPreparer`), unless
    the ticker is behind."""
    if any((one.last_fire_lateness_ms or 0) > BEHIND_MS for one in owned.values()):
        return
    for horizon_ms in WHILE_WAITING_HORIZONS_MS:
        if not keep_going():
            return
        prepare_upcoming(
            owned,
            transactions,
            clock,
            budget_s=float("inf"),
            horizon_ms=horizon_ms,
            keep_going=keep_going,
            lane="waiting",
            fair_orders=False,
        )


def _prepare_one(
    partition: OwnedPartition, transactions: FiringTransactions, schedule_id: str
) -> None:
    try:
        state = partition.state(schedule_id)
        if state is not None and partition.decided_ahead(state) is None:
            ahead = transactions.prepare(state, partition.partition)
            if ahead is not None:
                partition.keep_ahead(ahead)
    except Exception:
        # Preparing is only an optimisation: the fire decides it again, and quarantines a
        # schedule that cannot be decoded or decided (kairos.services.ticker.quarantine).
        logger.warning(
            "partition=%d schedule=%s could not be prepared ahead; deciding it at its fire",
            partition.partition,
            schedule_id,
            exc_info=True,
        )
