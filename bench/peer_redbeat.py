"""Peer benchmark: Celery beat with celery-redbeat on Redis, in the herd, steady and failover runs.

Run: `.venv/bin/python -m bench.peer_redbeat --scenarios herd steady failover
--sizes 10000 100000 300000 --json bench/results/redbeat.json`.

A *fire* is beat pushing the task message onto the `celery` list in Redis. No worker runs: an
observer process pops that list and records when each message arrived, the entry named in its
args and the beat process named in its `origin` header. Every run gets a fresh redis-server and
real `celery beat -S redbeat.RedBeatScheduler` subprocesses (bench/redbeat_app.py).

Entries are written straight into redbeat's layout (a hash per entry holding the JSON
`definition` and `meta`, and the `redbeat::schedule` sorted set scored by due time), with
redbeat's own JSON encoder, so setting up 300k entries takes seconds rather than 300k
`RedBeatSchedulerEntry.save()` round trips. The score written is the due instant, as redbeat
writes it after each fire; `save()` would compute it as `last_run_at + (next due − now)`, which
is off by however far `last_run_at` is from now.

- herd: N `crontab()` (every minute) entries whose last run is the minute before the herd
  instant T, so all N are due at T; T to the last first-fire, fires/s, lateness. One beat.
- steady: N `rrule` entries firing every `--period` s, entry i at second `i % period` of the
  period (redbeat stores rrule starts in whole seconds, so there is no finer spread; with 10k
  entries and a 60 s period that is ~167 due at each whole second). Lateness over `--window`
  and the beat process's CPU.
- failover: the steady load with two beats, one holding the redbeat lock and one blocked on it;
  the holder is SIGKILLed `--kill-after` s into the window. gap_s is the kill to the standby's
  first fire; lost and duplicated occurrences over the window.

Occurrences: beat fires an entry when the first slot after its `last_run_at` has passed, then
sets `last_run_at` to now, so one late fire stands for every slot it overslept. A fire is
credited to the first slot after the entry's previous fire; further slots it covered are lost
(coalesced); a fire covering no new slot is a duplicate.

Configs: `tuned` sets `redbeat_lock_timeout` 3 s and `beat_max_loop_interval` 1 s (failure
detected within ~3-4 s, like Kairos's tuned runs; `--tuned-*` change them); `default` leaves
celery's 300 s loop interval and redbeat's lock timeout of 5 × that. `--timeout` bounds each run
from the herd instant or window start; a run that hits it records `finished=False`.

What bounds redbeat here (celery-redbeat 2.4.2 on celery 5.7, from their code):

- One thread does everything. A tick first loads every due entry with a Redis round trip each
  (`RedBeatSchedulerEntry.from_key`), so a herd's first fire waits for all N to load; then, per
  entry, it writes the new `meta` and score (a MULTI/EXEC pipeline) and publishes (an LPUSH).
- The lock is extended only when a tick starts. When a tick plus the sleep after it outlasts
  `redbeat_lock_timeout`, the lock expires under it: a standby may take it and fire the same
  entries, and beat itself exits with LockNotOwnedError at its next tick (`beat_failures`).
- A standby retries the lock every `max_loop_interval`; with the defaults the holder's lock
  outlives it by up to 1500 s, so a default failover is not seen within any sensible window.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import redis
from celery.beat import DEFAULT_MAX_INTERVAL
from celery.schedules import crontab
from redbeat.decoder import RedBeatJSONEncoder
from redbeat.schedules import rrule

from bench.outcome import Outcome, percentiles, process_tree_cpu_s, write_outcomes
from bench.redbeat_app import (
    ENTRY_KEY_PREFIX,
    FIRE_TASK,
    LOCK_KEY,
    QUEUE,
    READY_MARKER,
    SCHEDULE_KEY,
)
from bench.redis_server import RedisServer, redis_server

REPO_ROOT = Path(__file__).resolve().parent.parent
WRITE_BATCH = 2_000
POP_BATCH = 1_000
# Seconds a `celery beat` takes from exec to holding the lock on an idle machine is ~1.5; the
# margin absorbs a loaded one (the lead's other benchmarks share the two cores).
BEAT_STARTUP_S = 8.0
POLL_S = 0.5


@dataclass(frozen=True)
class BeatConfig:
    name: str
    lock_timeout_s: float | None
    max_loop_interval_s: float | None

    def environment(self, redis_url: str) -> dict[str, str]:
        env = {**os.environ, "BENCH_REDIS_URL": redis_url}
        if self.lock_timeout_s is not None:
            env["BENCH_REDBEAT_LOCK_TIMEOUT"] = str(self.lock_timeout_s)
        if self.max_loop_interval_s is not None:
            env["BENCH_BEAT_MAX_LOOP_INTERVAL"] = str(self.max_loop_interval_s)
        return env

    def effective(self) -> dict[str, float]:
        """The values beat ends up with, resolved the way celery.beat and redbeat resolve them."""
        loop = self.max_loop_interval_s or DEFAULT_MAX_INTERVAL
        return {"max_loop_interval_s": loop, "lock_timeout_s": self.lock_timeout_s or 5 * loop}


CONFIG_NAMES = ("tuned", "default")


# --- beat processes ---------------------------------------------------------------------------


@dataclass
class Beat:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def failure(self) -> str | None:
        """Why beat exited on its own (celery logs it CRITICAL), or None while it runs."""
        if self.process.poll() is None:
            return None
        lines = self.log.read_text(errors="replace").splitlines()
        critical = [line for line in lines if "CRITICAL" in line]
        return (critical or lines[-1:] or [f"exit code {self.process.returncode}"])[0]

    def wait_for_log(self, marker: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while marker not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"beat {self.pid} never logged {marker!r}:\n{self.log_tail()}")
            time.sleep(0.1)

    def wait_for_lock(self, client: redis.Redis, timeout_s: float) -> None:
        self.wait_for_log(READY_MARKER, timeout_s)
        deadline = time.monotonic() + timeout_s
        while not client.exists(LOCK_KEY):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"beat {self.pid} never took the lock:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def beats(
    server: RedisServer, config: BeatConfig, workdir: Path, count: int
) -> Iterator[list[Beat]]:
    """Start `count` beats one after another: the first holds the lock, the rest wait on it."""
    started: list[Beat] = []
    client = server.client()
    try:
        for index in range(count):
            log = workdir / f"beat-{config.name}-{index}.log"
            with log.open("ab") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "bench.redbeat_app",
                        "beat",
                        "-S",
                        "redbeat.RedBeatScheduler",
                    ],
                    cwd=REPO_ROOT,
                    env=config.environment(server.url),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            beat = Beat(process, log)
            started.append(beat)
            if index == 0:
                beat.wait_for_lock(client, timeout_s=60)
            else:
                beat.wait_for_log(READY_MARKER, timeout_s=60)
        yield started
    finally:
        client.close()
        for beat in started:
            beat.stop()


# --- the observer -----------------------------------------------------------------------------


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


# --- writing entries --------------------------------------------------------------------------


def write_definitions(
    client: redis.Redis, names: Sequence[str], schedule_of: Callable[[int], Any]
) -> float:
    """Store each entry's definition as RedBeatSchedulerEntry.save() does; seconds it took."""
    started = time.monotonic()
    for first in range(0, len(names), WRITE_BATCH):
        with client.pipeline(transaction=False) as pipe:
            for index in range(first, min(len(names), first + WRITE_BATCH)):
                definition = {
                    "name": names[index],
                    "task": FIRE_TASK,
                    "args": [names[index]],
                    "kwargs": {},
                    "options": {},
                    "schedule": schedule_of(index),
                    "enabled": True,
                }
                pipe.hset(
                    ENTRY_KEY_PREFIX + names[index],
                    "definition",
                    json.dumps(definition, cls=RedBeatJSONEncoder),
                )
            pipe.execute()
    return time.monotonic() - started


def arm_entries(
    client: redis.Redis, names: Sequence[str], last_run_at: datetime, due_of: Callable[[int], float]
) -> None:
    """Give every entry its last run and put it in the schedule set at its first due second."""
    meta = json.dumps({"last_run_at": last_run_at}, cls=RedBeatJSONEncoder)
    for first in range(0, len(names), WRITE_BATCH):
        with client.pipeline(transaction=False) as pipe:
            for index in range(first, min(len(names), first + WRITE_BATCH)):
                key = ENTRY_KEY_PREFIX + names[index]
                pipe.hset(key, "meta", meta)
                # redbeat scores by whole seconds (calendar.timegm of the due instant).
                pipe.zadd(SCHEDULE_KEY, {key: math.floor(due_of(index))})
            pipe.execute()


def check_in_time(start_at: float, what: str) -> None:
    if time.time() > start_at - 0.5:
        raise RuntimeError(f"setup overran the {what}; raise BEAT_STARTUP_S")


def sleep_until(instant: float) -> None:
    time.sleep(max(0.0, instant - time.time()))


class CpuMeter:
    """CPU seconds processes used since the meter started, kept across a process's death."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.first = {pid: process_tree_cpu_s(pid) for pid in pids}
        self.last = dict(self.first)

    def sample(self) -> None:
        for pid in self.last:
            # A dead process reads 0: keep what it had used by the last sample.
            self.last[pid] = max(self.last[pid], process_tree_cpu_s(pid))

    def seconds(self, pids: Sequence[int] | None = None) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in pids or self.last)

    def sleep_until(self, instant: float) -> None:
        while (left := instant - time.time()) > 0:
            self.sample()
            time.sleep(min(POLL_S, left))
        self.sample()


# --- herd -------------------------------------------------------------------------------------


def run_herd(n: int, config: BeatConfig, args: argparse.Namespace, workdir: Path) -> Outcome:
    names = [f"herd-{index:07d}" for index in range(n)]
    every_minute = crontab()
    with redis_server() as server, observing(server, workdir) as fire_log:
        client = server.client()
        write_s = write_definitions(client, names, lambda _: every_minute)
        earliest = datetime.now(UTC) + timedelta(seconds=2 * write_s + BEAT_STARTUP_S)
        herd_at = earliest.replace(second=0, microsecond=0) + timedelta(minutes=1)
        # crontab fires at the first minute boundary after last_run_at: exactly T.
        arm_entries(client, names, herd_at - timedelta(minutes=1), lambda _: herd_at.timestamp())
        due = herd_at.timestamp()
        with beats(server, config, workdir, count=1) as (beat,):
            check_in_time(due, "herd instant")
            print(
                f"  herd N={n:,} {config.name}: written in {write_s:.1f}s; "
                f"herd at {herd_at:%H:%M:%S}Z"
            )
            sleep_until(due)
            cpu = CpuMeter([beat.pid, server.pid])
            deadline = due + args.timeout
            while len(fire_log.latest) < n and time.time() < deadline:
                cpu.sleep_until(time.time() + POLL_S)
                fire_log.refresh()
            # The herd tick extended the lock only when it began; beat finds out whether the lock
            # outlived the tick on its next tick, at most one loop interval later.
            time.sleep(min(config.effective()["max_loop_interval_s"], 5.0) + 1.0)
            beat_failure = beat.failure()
    first_fires: dict[str, float] = {}
    duplicated = 0
    for fire in sorted(fire_log.fires, key=lambda fire: fire.arrived):
        if fire.entry not in first_fires:
            first_fires[fire.entry] = fire.arrived
        elif fire.arrived < due + 60:  # before the next minute: the same occurrence again
            duplicated += 1
    fires = len(first_fires)
    seconds = max(first_fires.values()) - due if first_fires else None
    return Outcome(
        system="redbeat",
        scenario="herd",
        n=n,
        config=config.name,
        fires=fires,
        expected=n,
        lost=n - fires,
        duplicated=duplicated,
        seconds=seconds,
        fires_per_s=fires / seconds if seconds else None,
        lateness_ms=percentiles([(arrived - due) * 1000 for arrived in first_fires.values()]),
        cpu_s=cpu.seconds([beat.pid]),
        finished=fires == n,
        extra={
            **config.effective(),
            "first_fire_s": min(first_fires.values()) - due if first_fires else None,
            "redis_cpu_s": cpu.seconds([server.pid]),
            "write_s": write_s,
            "beat_failures": [beat_failure] if beat_failure else [],
        },
    )


# --- steady and failover ----------------------------------------------------------------------


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


@dataclass
class SteadyRun:
    tally: SlotTally
    cpu_s: float
    redis_cpu_s: float
    gap_s: float | None
    beat_failures: list[str]
    write_s: float


def run_spread(
    n: int, config: BeatConfig, args: argparse.Namespace, workdir: Path, *, failover: bool
) -> SteadyRun:
    period: int = args.period
    names = [f"steady-{index:07d}" for index in range(n)]
    with redis_server() as server, observing(server, workdir) as fire_log:
        client = server.client()
        # Anchor every entry's rrule a period in the past: rrule.after() walks from dtstart, and
        # the slots must not depend on when the window starts (chosen after the writes).
        anchor = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=period)
        schedules = [
            rrule("SECONDLY", dtstart=anchor + timedelta(seconds=offset), interval=period)
            for offset in range(period)
        ]
        write_s = write_definitions(client, names, lambda index: schedules[index % period])
        startup_s = BEAT_STARTUP_S * (2 if failover else 1)
        window_start = math.ceil(time.time() + 2 * write_s + startup_s)
        window = (float(window_start), float(window_start + args.window))
        first_slot = {name: anchor.timestamp() + index % period for index, name in enumerate(names)}
        # Every slot at or after the window start is owed; none before it.
        last_run_at = window_start - 0.001

        def first_owed(index: int) -> float:
            first = first_slot[names[index]]
            return first + math.ceil((window_start - first) / period) * period

        arm_entries(client, names, datetime.fromtimestamp(last_run_at, UTC), first_owed)
        with beats(server, config, workdir, count=2 if failover else 1) as running:
            check_in_time(window[0], "window start")
            label = "failover" if failover else "steady"
            print(
                f"  {label} N={n:,} {config.name}: written in {write_s:.1f}s; window "
                f"{datetime.fromtimestamp(window[0], UTC):%H:%M:%S}Z + {args.window}s"
            )
            sleep_until(window[0])
            beat_pids = [beat.pid for beat in running]
            cpu = CpuMeter([*beat_pids, server.pid])
            killed_at = None
            if failover:
                cpu.sleep_until(window[0] + args.kill_after)
                running[0].process.send_signal(signal.SIGKILL)
                killed_at = time.time()
            cpu.sleep_until(window[1])
            last_slot_of = {
                name: first + (math.ceil((window[1] - first) / period) - 1) * period
                for name, first in first_slot.items()
            }
            deadline = window[0] + args.timeout
            while time.time() < deadline:
                fire_log.refresh()
                if all(fire_log.latest.get(name, 0.0) >= last_slot_of[name] for name in names):
                    break
                time.sleep(POLL_S)
            # The SIGKILLed holder did not fail; only a beat that exited by itself did.
            failures = [
                failure
                for beat in (running[1:] if failover else running)
                if (failure := beat.failure()) is not None
            ]
    gap_s = None
    if killed_at is not None:
        survivor_fires = [
            fire.arrived
            for fire in fire_log.fires
            if fire.beat_pid == running[1].pid and fire.arrived >= killed_at
        ]
        gap_s = min(survivor_fires) - killed_at if survivor_fires else None
    tally = tally_slots(fire_log.arrivals_by_entry(), first_slot, period, last_run_at, window)
    return SteadyRun(
        tally, cpu.seconds(beat_pids), cpu.seconds([server.pid]), gap_s, failures, write_s
    )


def spread_outcome(
    scenario: str, n: int, config: BeatConfig, args: argparse.Namespace, run: SteadyRun
) -> Outcome:
    tally = run.tally
    return Outcome(
        system="redbeat",
        scenario=scenario,
        n=n,
        config=config.name,
        fires=tally.fired,
        expected=tally.expected,
        lost=tally.expected - tally.fired,
        duplicated=tally.duplicated,
        seconds=float(args.window),
        fires_per_s=tally.fired / args.window,
        lateness_ms=percentiles(tally.lateness_ms),
        cpu_s=run.cpu_s,
        gap_s=run.gap_s,
        finished=tally.unobserved == 0,
        extra={
            **config.effective(),
            "period_s": args.period,
            "coalesced": tally.coalesced,
            "unobserved_at_deadline": tally.unobserved,
            "redis_cpu_s": run.redis_cpu_s,
            "write_s": run.write_s,
            "beat_failures": run.beat_failures,
            **({"kill_after_s": args.kill_after} if scenario == "failover" else {}),
        },
    )


# --- main -------------------------------------------------------------------------------------


def run_scenario(
    scenario: str, n: int, config: BeatConfig, args: argparse.Namespace, workdir: Path
) -> Outcome:
    if scenario == "herd":
        return run_herd(n, config, args, workdir)
    run = run_spread(n, config, args, workdir, failover=scenario == "failover")
    return spread_outcome(scenario, n, config, args, run)


def format_row(outcome: Outcome) -> str:
    def number(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    late = outcome.lateness_ms
    return (
        f"{outcome.scenario:<9}{outcome.config:<8}{outcome.n:>8,} "
        f"{outcome.fires:>8,}/{outcome.expected:<8,}{outcome.lost:>7,}{outcome.duplicated:>5,} "
        f"{number(outcome.seconds):>8}{number(outcome.fires_per_s, 0):>8} "
        f"{number(late.get('p50')):>9}{number(late.get('p99')):>9}{number(late.get('max')):>9} "
        f"{number(outcome.cpu_s):>7}{number(outcome.gap_s, 2):>7} "
        f"{'yes' if outcome.finished else 'NO'}"
    )


TABLE_HEADER = (
    f"{'scenario':<9}{'config':<8}{'n':>8} {'fires':>8}/{'expected':<8}{'lost':>7}{'dup':>5} "
    f"{'seconds':>8}{'fires/s':>8} {'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'cpu s':>7}"
    f"{'gap s':>7} finished"
)


@contextmanager
def run_directory(keep_under: Path | None, name: str) -> Iterator[Path]:
    if keep_under is None:
        with tempfile.TemporaryDirectory(prefix="kairos-bench-redbeat-") as tmp:
            yield Path(tmp)
    else:
        workdir = keep_under / name
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=["herd", "steady", "failover"],
        default=["herd", "steady", "failover"],
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000], help="herd sizes"
    )
    parser.add_argument(
        "--steady-sizes",
        type=int,
        nargs="+",
        default=[10_000],
        help="entries in the steady and failover runs",
    )
    parser.add_argument("--configs", nargs="+", choices=CONFIG_NAMES, default=list(CONFIG_NAMES))
    parser.add_argument(
        "--tuned-lock-timeout",
        type=float,
        default=3.0,
        help="tuned: redbeat_lock_timeout, how long a dead holder keeps the lock (redbeat "
        "extends it by whole seconds)",
    )
    parser.add_argument(
        "--tuned-max-loop-interval",
        type=float,
        default=1.0,
        help="tuned: beat_max_loop_interval, also how often a standby retries the lock",
    )
    parser.add_argument(
        "--period", type=int, default=60, help="steady/failover: seconds between an entry's fires"
    )
    parser.add_argument(
        "--window", type=int, default=120, help="steady/failover: seconds of occurrences counted"
    )
    parser.add_argument(
        "--kill-after",
        type=float,
        default=30.0,
        help="failover: seconds into the window the lock holder is killed",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds from the herd instant / window start until a run gives up",
    )
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    parser.add_argument(
        "--logs", type=Path, help="keep each run's beat logs and observed fires under this dir"
    )
    args = parser.parse_args()
    if {"steady", "failover"} & set(args.scenarios) and args.window > args.timeout:
        parser.error("need --window <= --timeout")
    if "failover" in args.scenarios and args.kill_after >= args.window:
        parser.error("need --kill-after < --window")

    configs = {
        "tuned": BeatConfig("tuned", args.tuned_lock_timeout, args.tuned_max_loop_interval),
        "default": BeatConfig("default", lock_timeout_s=None, max_loop_interval_s=None),
    }
    outcomes: list[Outcome] = []
    started = time.monotonic()
    for scenario in args.scenarios:
        sizes = args.sizes if scenario == "herd" else args.steady_sizes
        for n in sizes:
            for config_name in args.configs:
                with run_directory(args.logs, f"{scenario}-{n}-{config_name}") as workdir:
                    outcome = run_scenario(scenario, n, configs[config_name], args, workdir)
                outcomes.append(outcome)
                print(f"{TABLE_HEADER}\n{format_row(outcome)}", flush=True)
                if args.json:  # after every run, so a long run that fails keeps what it measured
                    write_outcomes(args.json, outcomes)
    print(f"\nredbeat: {time.monotonic() - started:.0f}s in all\n{TABLE_HEADER}")
    for outcome in outcomes:
        print(format_row(outcome))


if __name__ == "__main__":
    main()
