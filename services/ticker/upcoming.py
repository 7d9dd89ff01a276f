"""Idle time before the next fire: how long it lasts, and preparing what upcoming fires need.

Preparing decodes upcoming schedules' states, decides their next occurrence ahead and encodes
the records it will need, so a herd spends its time sending, not computing (`Ahead`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from kairos.core.instants import epoch_ms
from kairos.services.ticker.partition import DECODED_AHEAD_MS, OwnedPartition
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
    return max(0.0, (nearest - epoch_ms(now)) / 1000)


def prepare_upcoming(
    owned: Mapping[int, OwnedPartition],
    transactions: FiringTransactions,
    clock: Callable[[], datetime],
    *,
    budget_s: float,
) -> float:
    """Prepare the fires due within `DECODED_AHEAD_MS`, for at most `budget_s`; time spent.

    Each partition's schedules committed behind its cursor first, then the cursor's walk."""
    started = time.monotonic()
    now_ms = epoch_ms(clock())
    horizon = now_ms + DECODED_AHEAD_MS
    for partition in owned.values():
        behind = partition.behind_cursor
        while behind:
            if time.monotonic() - started >= budget_s:
                return time.monotonic() - started
            for _ in range(min(len(behind), _PREPARE_SLICE)):
                _prepare_one(partition, transactions, behind.popleft())
        from_ms, position = partition.prepared_cursor
        if from_ms < now_ms:
            from_ms, position = now_ms, 0
        for instant, schedule_ids in partition.store.due_instants(from_ms, horizon):
            if instant > from_ms:
                position = 0
            while position < len(schedule_ids):
                if time.monotonic() - started >= budget_s:
                    partition.prepared_cursor = (instant, position)
                    return time.monotonic() - started
                for schedule_id in schedule_ids[position : position + _PREPARE_SLICE]:
                    _prepare_one(partition, transactions, schedule_id)
                position += _PREPARE_SLICE
            partition.prepared_cursor = (instant, len(schedule_ids))
            partition.keep_fair_order(instant, schedule_ids)
    return time.monotonic() - started


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
