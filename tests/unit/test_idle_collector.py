"""The ticker's garbage collection in idle time: young garbage at once, frozen cycles later."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kairos.services.ticker.garbage import IdleCollector

pytestmark = pytest.mark.unit


class Node:
    def __init__(self) -> None:
        self.itself = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_a_turn_that_keeps_what_it_allocates_runs_no_full_pass() -> None:
    """A herd's transaction keeps tens of thousands of new objects; the collector would walk
    them in full passes every 70,000 allocations, stalling the fires (garbage.py)."""
    IdleCollector().idle(idle_s=0.0)
    full_passes = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full_passes.append(info)

    gc.callbacks.append(count)
    try:
        kept = [[n] for n in range(1_000_000)]
    finally:
        gc.callbacks.remove(count)
    assert len(kept) == 1_000_000
    assert full_passes == []


def test_young_cycles_die_before_the_freeze_and_frozen_ones_at_the_next_full_collection() -> None:
    clock = [0.0]
    collector = IdleCollector(full_every_s=600, clock=lambda: clock[0])

    dropped = Node()
    dead_young = weakref.ref(dropped)
    del dropped
    kept = Node()
    frozen_later_dropped = weakref.ref(kept)
    collector.idle(idle_s=30)
    assert dead_young() is None, "young cyclic garbage is collected before freezing"
    assert gc.get_freeze_count() > 0

    del kept
    clock[0] = 10
    collector.idle(idle_s=30)
    assert frozen_later_dropped() is not None, "frozen: no collection walks it until the next full"

    clock[0] = 601
    collector.idle(idle_s=0.2)
    assert frozen_later_dropped() is not None, "no full collection without the idle time for it"
    collector.idle(idle_s=30)
    assert frozen_later_dropped() is None, "the full collection, due and with time, frees it"
