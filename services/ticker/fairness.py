"""Fair herds: when more is due than a transaction carries, every owner's first fires go first.

A transaction carries at most `max_decisions_per_transaction` decisions, so a herd larger than
that is fired over several transactions. Walked in index order, one team's 300,000 fires due at
midnight fill the first transactions and another team's ten wait behind them. Ordered instead
by each schedule's rank among its owner's due at that instant (the owner's 1st, 2nd, ...) and
merged across partitions by that rank, the first transaction holds every owner's first fires:
a team waits behind its own bulk, never behind another's.

An instant's order is built in idle time (`upcoming.prepare_upcoming`), from the owners of the
states it decodes then; the ranks of an instant not prepared (no idle time) are the schedules'
positions in the index, which still interleaves the partitions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar

FAIR_ORDER_MIN = 1_000
"""An instant with fewer schedules due on a partition keeps index order: ordering it costs more
than it could change (it fits in one transaction beside the other partitions' few)."""

Partition = TypeVar("Partition")


@dataclass(frozen=True)
class FairOrder:
    """The schedules due at one instant of one partition, by their rank within their owner."""

    ranked: list[tuple[int, str]]
    """(rank, schedule id), lowest rank first; equal ranks keep index order."""
    members: frozenset[str]
    top: int
    """One more than the highest rank: where the ranks of what follows the order begin."""


def fair_order(schedule_ids: list[str], owner_of: Callable[[str], str | None]) -> FairOrder:
    """The order of `schedule_ids` (one instant's, in index order) by rank within owner.

    `owner_of` answers `None` for a schedule whose owner is not known (not decoded): those
    share one rank sequence, as if one owner.
    """
    counts: dict[str | None, int] = {}
    ranked = []
    for schedule_id in schedule_ids:
        owner = owner_of(schedule_id)
        rank = counts.get(owner, 0)
        counts[owner] = rank + 1
        ranked.append((rank, schedule_id))
    ranked.sort(key=itemgetter(0))
    return FairOrder(ranked, frozenset(schedule_ids), max(counts.values(), default=0))


Ranked = tuple[int, int, str]
"""(rank, the partition's position among those merged, schedule id): compared as a tuple, lowest
rank first and partitions in turn on a tie, so the merge needs no wrapper around each stream."""


def ranked_due(
    instants: Iterable[tuple[int, list[str]]],
    orders: dict[int, FairOrder],
    due_ms_of: Callable[[str], int | None],
    position: int,
) -> Iterator[Ranked]:
    """Each schedule due (`instants`: oldest first, each with its ids in index order) with its
    rank, by rank, tagged with the partition's `position`. An instant's ranks begin after the
    previous instant's, so older fires go first; a schedule that became due at an instant after
    its order was built follows it, and one that left is skipped."""
    base = 0
    for instant, schedule_ids in instants:
        order = orders.get(instant)
        if order is None:
            for offset, schedule_id in enumerate(schedule_ids):
                yield base + offset, position, schedule_id
            base += len(schedule_ids)
            continue
        for rank, schedule_id in order.ranked:
            if due_ms_of(schedule_id) == instant:
                yield base + rank, position, schedule_id
        base += order.top
        joined = [sid for sid in schedule_ids if sid not in order.members]
        for offset, schedule_id in enumerate(joined):
            yield base + offset, position, schedule_id
        base += len(joined)


def merged_by_rank(
    partitions: Sequence[Partition], streams: Iterable[Iterator[Ranked]]
) -> Iterator[tuple[Partition, str]]:
    """The partitions' ranked streams (each tagged with its partition's position in
    `partitions`) as one, lowest rank first; partitions in turn on a tie."""
    for _, position, schedule_id in heapq.merge(*streams):
        yield partitions[position], schedule_id
