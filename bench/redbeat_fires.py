"""The fires of bench/peer_redbeat.py: the observer process that records each task message beat
pushes, and the crediting of those fires to the slots their entries were due in.
"""

from __future__ import annotations

import base64
import json
import math
import multiprocessing
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path

import redis

from bench.redbeat_app import QUEUE
from bench.redis_server import RedisServer

POP_BATCH = 1_000


def observe(port: int, path: Path, stop: Event) -> None:
    """Pop every task message beat pushes; write `arrival<TAB>entry<TAB>beat pid` lines."""
    client = redis.Redis(host="127.0.0.1", port=port)
    with path.open("w") as out:
        while True:
            popped = client.brpop([QUEUE], timeout=0.1)
            if popped is None:
                if stop.is_set():
                    return
                continue
            arrived = time.time()
            batch = [popped[1], *(client.rpop(QUEUE, POP_BATCH) or [])]
            for raw in batch:
                message = json.loads(raw)
                # Protocol 2 body: base64 JSON of [args, kwargs, embed]; args is [entry name].
                args = json.loads(base64.b64decode(message["body"]))[0]
                origin = message["headers"]["origin"]  # "gen<pid>@<host>"
                beat_pid = origin.split("@", 1)[0].removeprefix("gen")
                out.write(f"{arrived:.6f}\t{args[0]}\t{beat_pid}\n")
            out.flush()


@dataclass(frozen=True)
class Fire:
    arrived: float
    entry: str
    beat_pid: int


class FireLog:
    """The observer's output, read incrementally as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fires: list[Fire] = []
        self.latest: dict[str, float] = {}
        self._offset = 0

    def refresh(self) -> None:
        if not self.path.exists():
            return
        with self.path.open() as source:
            source.seek(self._offset)
            chunk = source.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            arrived, entry, beat_pid = line.split("\t")
            fire = Fire(float(arrived), entry, int(beat_pid))
            self.fires.append(fire)
            self.latest[entry] = max(fire.arrived, self.latest.get(entry, 0.0))

    def arrivals_by_entry(self) -> dict[str, list[float]]:
        arrivals: dict[str, list[float]] = defaultdict(list)
        for fire in self.fires:
            arrivals[fire.entry].append(fire.arrived)
        for times in arrivals.values():
            times.sort()
        return arrivals


@contextmanager
def observing(server: RedisServer, workdir: Path) -> Iterator[FireLog]:
    path = workdir / "fires.tsv"
    stop = multiprocessing.Event()
    observer = multiprocessing.Process(target=observe, args=(server.port, path, stop))
    observer.start()
    fire_log = FireLog(path)
    try:
        yield fire_log
    finally:
        stop.set()
        observer.join(timeout=30)
        if observer.is_alive():
            observer.kill()
        fire_log.refresh()


@dataclass
class SlotTally:
    """Window slots by what happened to them, and duplicate fires."""

    expected: int = 0
    fired: int = 0
    coalesced: int = 0
    unobserved: int = 0
    duplicated: int = 0
    lateness_ms: list[float] = field(default_factory=list)


def slots_in_window(
    first: float, period: float, k_from: int, k_to: int, window: tuple[float, float]
) -> int:
    """How many slots `first + k·period`, k_from ≤ k ≤ k_to, fall in [start, end)."""
    start, end = window
    low = max(k_from, math.ceil((start - first) / period))
    high = min(k_to, math.ceil((end - first) / period) - 1)
    return max(0, high - low + 1)


def tally_slots(
    arrivals: dict[str, list[float]],
    first_slot: dict[str, float],
    period: float,
    last_run_at: float,
    window: tuple[float, float],
) -> SlotTally:
    """Credit each fire to the first slot after the entry's previous fire (see the docstring)."""
    tally = SlotTally()
    start, end = window
    for entry, first in first_slot.items():
        last_slot = math.ceil((end - first) / period) - 1
        covered_until = last_run_at
        for arrived in arrivals.get(entry, ()):
            owed = max(0, math.floor((covered_until - first) / period) + 1)
            reached = math.floor((arrived - first) / period)
            if reached < owed:
                if start <= first + reached * period < end:
                    tally.duplicated += 1
            else:
                slot = first + owed * period
                if start <= slot < end:
                    tally.fired += 1
                    tally.lateness_ms.append((arrived - slot) * 1000)
                tally.coalesced += slots_in_window(first, period, owed + 1, reached, window)
            covered_until = arrived
        owed = max(0, math.floor((covered_until - first) / period) + 1)
        tally.unobserved += slots_in_window(first, period, owed, last_slot, window)
        tally.expected += slots_in_window(
            first, period, max(0, math.floor((last_run_at - first) / period) + 1), last_slot, window
        )
    return tally
