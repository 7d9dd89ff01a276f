"""Peer benchmark: APScheduler 4 (4.0.0a6), SQLAlchemy data store on PostgreSQL, schedulers only.

Run: `.venv/bin/python -m bench.peer_apscheduler --scenarios herd steady failover
--sizes 10000 100000 300000 --json bench/results/apscheduler.json`.

The script starts and stops its own PostgreSQL cluster (kairos.devinfra.postgres) and runs
every scenario on a fresh database, with scheduler processes (bench/apscheduler_node.py,
`role=scheduler`, no worker) and an observer in this process.

What a fire is. APScheduler's scheduler loop acquires at most 100 due schedules at a time
(`acquire_schedules(..., 100)`, hard-coded), inserts one job per due occurrence, each in its own
transaction (`add_job`), and then releases the batch with the schedules' next fire times. The
committed job row is the durable hand-off, like a Kafka commit for Kairos; after each commit the
store publishes `JobAdded` through the event broker. The asyncpg broker sends it as a
`pg_notify` on the `apscheduler` channel; the observer LISTENs there and records the receive
time, the sending backend's pid (so which scheduler fired) and the job id. `JobAdded` carries no
fire time, so at the end the job ids are joined with the `jobs` table's `scheduled_fire_time`.
Lateness = receive time - scheduled fire time. (`ScheduleUpdated` is no fire signal: it comes
after the whole batch is released and names the *next* fire time.)

`fires` are the distinct occurrences observed through the broker. The other counts come from
the `jobs` table, the durable truth, read once the schedulers are stopped: `lost` occurrences
with no job although their schedule moved past them (coalesced away), `duplicated` extra jobs
for the same (schedule, fire time), `extra.pending` occurrences not fired yet when `--timeout`
(counted from the herd instant or the window's start) ran out, which makes `finished` False.
Jobs committed without their notification ever arriving (a SIGKILLed scheduler loses the
notifications still queued in its broker) are `extra.unobserved_fires`.

Scenarios (each in configs `tuned` and `default`, recorded in `Outcome.config`):

- herd: N `DateTrigger` schedules loaded (bulk INSERT, as `add_schedule` would write them) with a
  placeholder time a day away; with the scheduler up, one UPDATE moves them all to the instant T
  and one `ScheduleUpdated` notification wakes it, as `add_schedule` would. Seconds from T to
  the last fire, fires/s, lateness. One scheduler process.
- steady: N (`--steady-size`) `IntervalTrigger(seconds=60)` schedules at evenly spread offsets
  within the minute, bulk-loaded with the scheduler already up; lateness and the scheduler's
  CPU seconds over `--window`, which starts once the load is done. One scheduler process.
- failover: the steady load on two scheduler processes; `--kill-after` seconds into the window
  the sender of the next `JobAdded` is SIGKILLed the moment the observer receives it, i.e. the
  process that fired most recently, just after a job commit: the likeliest moment to catch it
  in the middle of a batch, holding acquired schedules. Both processes compete for every due
  schedule (no partitioning), so the survivor's next fire (`gap_s`) comes at once; what the
  kill costs is the stranded batch, acquired by the dead process and unavailable until its lease
  expires (`extra.stranded_recovery_s`), and the jobs it committed before releasing its batch,
  which the survivor fires again (`duplicated`).

Failure detection. APScheduler has no heartbeat: a schedule acquired by a dead scheduler becomes
available once its `acquired_until` passes, set to now + `lease_duration` (default 30 s) and
extended every `lease_duration / 2` while the batch is processed. `tuned` sets
`lease_duration=3 s`, like a Kairos ticker's tuned 3 s session timeout; `default` keeps 30 s. The
batch size (100) is not configurable; the cleanup interval (15 min) plays no part here.

Durability: the cluster runs with `fsync=off` but `synchronous_commit=on`, so a commit returns
once its WAL is written to the operating system, not flushed to disk, which is a local Kafka
broker's default too (acknowledged after the page-cache append, flush left to the OS).

Limitations of 4.0.0a6 found here:

- Its SQLAlchemy store imports `sniffio` without declaring it; with `sniffio` installed, the
  asyncpg broker drops every notification it receives under anyio >= 4.14 (`NoEventLoopError`,
  apscheduler issue #1141), so a scheduler never hears of schedules added elsewhere. The node
  works around it (see bench/apscheduler_node.py); the observer does not use the broker's
  receiving side.
- The survivor's sleep ignores schedules still marked acquired (`get_next_schedule_run_time`
  filters `acquired_by IS NULL`), so stranded schedules are retried only when the survivor
  wakes for another reason (under steady load it wakes many times a second).
- `add_schedule` costs several transactions per schedule, hence the bulk load.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler import Schedule
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bench.apscheduler_processes import Node, Notice, Observer, scheduler_nodes
from bench.apscheduler_store import (
    Occurrence,
    Tally,
    create_store,
    first_fire,
    load,
    move_herd,
    sleep_until,
    tally,
    wait_until_handled,
    whole_ms,
)
from bench.outcome import Outcome, percentiles, process_tree_cpu_s, write_outcomes
from kairos.devinfra.postgres import LocalPostgres

CONFIGS: dict[str, float | None] = {"tuned": 3.0, "default": None}
"""lease_duration in seconds per config; None keeps APScheduler's default (30 s)."""
DEFAULT_LEASE_S = 30.0
INTERVAL = timedelta(seconds=60)
DURABLE_AS_A_BROKER = {"fsync": "off", "full_page_writes": "off"}


def lease_seconds(config: str) -> float:
    lease_s = CONFIGS[config]
    return DEFAULT_LEASE_S if lease_s is None else lease_s


def outcome_from(
    scenario: str, n: int, config: str, expected: set[Occurrence], counted: Tally, **fields: Any
) -> Outcome:
    extra = {
        "lease_duration_s": lease_seconds(config),
        "schedules_per_batch": 100,
        "pending": counted.pending,
        "unobserved_fires": counted.unobserved_fires,
        "observed_duplicates": counted.observed_duplicates,
        **fields.pop("extra", {}),
    }
    return Outcome(
        system="apscheduler",
        scenario=scenario,
        n=n,
        config=config,
        fires=counted.fires,
        expected=len(expected),
        lost=counted.lost,
        duplicated=counted.duplicated,
        lateness_ms={k: round(v, 1) for k, v in percentiles(counted.lateness_ms).items()},
        extra=extra,
        **fields,
    )


async def run_herd(
    cluster: LocalPostgres, n: int, config: str, timeout_s: float, workdir: Path
) -> Outcome:
    url = cluster.create_database("apscheduler")
    await create_store(url)
    placeholder = datetime.now(UTC) + timedelta(days=1)
    ids = [f"herd-{i:07d}" for i in range(n)]
    load_s = await load(url, (first_fire(i, DateTrigger(placeholder)) for i in ids))
    async with Observer.listening(url) as observer:
        async with scheduler_nodes(url, ["herd"], CONFIGS[config], workdir) as nodes:
            node = nodes[0]
            due = await move_herd(observer.conn, n)
            await observer.wake_schedulers(due)
            await sleep_until(due.timestamp())
            cpu_before = process_tree_cpu_s(node.pid), process_tree_cpu_s(cluster.server_pid())
            finished = await wait_until_handled(observer, due, due.timestamp() + timeout_s)
            cpu_s = process_tree_cpu_s(node.pid) - cpu_before[0]
            postgres_cpu_s = process_tree_cpu_s(cluster.server_pid()) - cpu_before[1]
        # Counted once the scheduler is stopped, so that a herd cut short by the timeout gets
        # no more jobs than notifications meanwhile.
        expected = {(i, due) for i in ids}
        counted = await tally(observer.conn, expected, observer.notices())
    last = max((notice.received for notice in counted.first_seen.values()), default=None)
    seconds = None if last is None else last - due.timestamp()
    return outcome_from(
        "herd",
        n,
        config,
        expected,
        counted,
        seconds=None if seconds is None else round(seconds, 3),
        fires_per_s=round(counted.fires / seconds, 1) if seconds else None,
        cpu_s=round(cpu_s, 2),
        finished=finished and counted.pending == 0,
        extra={"load_s": round(load_s, 1), "postgres_cpu_s": round(postgres_cpu_s, 2)},
    )


@dataclass(frozen=True)
class SteadyLoad:
    """N schedules firing once a minute, schedule i at offset i/N of the minute from `start`."""

    n: int
    start: datetime

    def offset(self, index: int) -> timedelta:
        return timedelta(microseconds=index * 60_000_000 // self.n)

    def ids(self) -> list[str]:
        return [f"steady-{i:07d}" for i in range(self.n)]

    def schedules(self) -> Iterable[Schedule]:
        for index, schedule_id in enumerate(self.ids()):
            trigger = IntervalTrigger(seconds=60, start_time=self.start + self.offset(index))
            yield first_fire(schedule_id, trigger)

    def occurrences(self, window_start: datetime, window_end: datetime) -> set[Occurrence]:
        """Every (schedule, fire time) due in [window_start, window_end)."""
        expected = set()
        for index, schedule_id in enumerate(self.ids()):
            first = self.start + self.offset(index)
            skipped = max(0, math.ceil((window_start - first) / INTERVAL))
            due = first + skipped * INTERVAL
            while due < window_end:
                expected.add((schedule_id, due))
                due += INTERVAL
        return expected


@dataclass
class SteadyWindow:
    """What the steady (or failover) scenario measured over its window."""

    steady: SteadyLoad
    start: datetime
    seconds: float
    load_s: float
    pids: dict[int, str]
    """The backend pid of each scheduler's broker connection, to its name."""
    cpu_used: dict[str, float] = field(default_factory=dict)
    """CPU seconds per scheduler; the killed one's up to its kill."""
    postgres_cpu_s: float = 0.0
    killed: Node | None = None
    killed_at: float = 0.0
    finished: bool = False

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds)


async def run_steady(
    cluster: LocalPostgres,
    n: int,
    config: str,
    *,
    window_s: float,
    timeout_s: float,
    workdir: Path,
    kill_after_s: float | None = None,
) -> Outcome:
    """The steady scenario, or with `kill_after_s` the failover one (two schedulers)."""
    scenario = "steady" if kill_after_s is None else "failover"
    url = cluster.create_database("apscheduler")
    await create_store(url)
    names = ["steady"] if kill_after_s is None else ["failover-a", "failover-b"]
    async with Observer.listening(url) as observer:
        async with scheduler_nodes(url, names, CONFIGS[config], workdir) as nodes:
            pids = await observer.backend_pids(names)
            window = await load_then_open_window(url, observer, n, window_s, pids)
            await measure_window(
                cluster, observer, nodes, window, timeout_s=timeout_s, kill_after_s=kill_after_s
            )
        # Counted once the schedulers are stopped (see run_herd).
        expected = window.steady.occurrences(window.start, window.end)
        notices = observer.notices()
        counted = await tally(observer.conn, expected, notices)
    return steady_outcome(
        scenario, n, config, window, expected=expected, counted=counted, notices=notices
    )


async def load_then_open_window(
    url: str, observer: Observer, n: int, window_s: float, pids: dict[int, str]
) -> SteadyWindow:
    """Load the steady schedules with the schedulers up, wake them, and place the window."""
    steady = SteadyLoad(n, whole_ms(datetime.now(UTC) + timedelta(seconds=3 + n * 100e-6)))
    load_s = await load(url, steady.schedules())
    await observer.wake_schedulers(steady.start)
    # Occurrences due while the load was still running fire late through no fault of the
    # schedulers: the window starts after it.
    window_start = max(steady.start, whole_ms(datetime.now(UTC) + timedelta(seconds=2)))
    return SteadyWindow(steady, window_start, window_s, load_s, pids)


async def measure_window(
    cluster: LocalPostgres,
    observer: Observer,
    nodes: list[Node],
    window: SteadyWindow,
    *,
    timeout_s: float,
    kill_after_s: float | None,
) -> None:
    """CPU over the window, the kill `kill_after_s` into it, then the wait for every fire."""
    await sleep_until(window.start.timestamp())
    cpu_before = {node.name: process_tree_cpu_s(node.pid) for node in nodes}
    postgres_before = process_tree_cpu_s(cluster.server_pid())
    if kill_after_s is not None:
        await sleep_until(window.start.timestamp() + kill_after_s)
        await kill_the_next_sender(observer, nodes, window, cpu_before)
    await sleep_until(window.end.timestamp())
    for node in nodes:
        if node is not window.killed:
            window.cpu_used[node.name] = process_tree_cpu_s(node.pid) - cpu_before[node.name]
    window.postgres_cpu_s = process_tree_cpu_s(cluster.server_pid()) - postgres_before
    last_due = window.end - timedelta(microseconds=1)
    window.finished = await wait_until_handled(
        observer, last_due, window.start.timestamp() + timeout_s
    )


async def kill_the_next_sender(
    observer: Observer, nodes: list[Node], window: SteadyWindow, cpu_before: dict[str, float]
) -> None:
    """SIGKILL the scheduler that fires next; record which, when, and its CPU until then."""
    by_name = {node.name: node for node in nodes}
    cpu_at_kill = {node.name: process_tree_cpu_s(node.pid) for node in nodes}
    backend, window.killed_at = await observer.kill_next_sender(
        {backend: by_name[name].pid for backend, name in window.pids.items()}
    )
    killed = window.killed = by_name[window.pids[backend]]
    window.cpu_used[killed.name] = cpu_at_kill[killed.name] - cpu_before[killed.name]


def steady_outcome(
    scenario: str,
    n: int,
    config: str,
    window: SteadyWindow,
    *,
    expected: set[Occurrence],
    counted: Tally,
    notices: list[Notice],
) -> Outcome:
    window_s = window.seconds
    extra: dict[str, Any] = {
        "load_s": round(window.load_s, 1),
        "postgres_cpu_s": round(window.postgres_cpu_s, 2),
        "window_start": window.start.isoformat(),
        "cpu_s_by_scheduler": {name: round(cpu, 2) for name, cpu in window.cpu_used.items()},
    }
    gap_s = None
    if window.killed is not None:
        extra |= failover_extra(
            window.killed,
            window.killed_at,
            lease_s=lease_seconds(config),
            pids=window.pids,
            notices=notices,
            counted=counted,
        )
        gap_s = extra.pop("gap_s")
    return outcome_from(
        scenario,
        n,
        config,
        expected,
        counted,
        seconds=window_s,
        fires_per_s=round(counted.fires / window_s, 1),
        cpu_s=round(sum(window.cpu_used.values()), 2),
        gap_s=gap_s,
        finished=window.finished and counted.pending == 0,
        extra=extra,
    )


def failover_extra(
    killed: Node,
    killed_at: float,
    *,
    lease_s: float,
    pids: dict[int, str],
    notices: list[Notice],
    counted: Tally,
) -> dict[str, Any]:
    survivor_fires = [
        notice.received
        for notice in notices
        if notice.received > killed_at and pids.get(notice.sender_pid) != killed.name
    ]
    # Fires after the kill of occurrences due before it and late by over half a lease, more
    # than the steady load makes them: the killed process's batch, stranded until its lease
    # expired, and fired again by the survivor where the killed process had committed its job.
    stranded: dict[Occurrence, float] = {}
    for notice in notices:
        occurrence = counted.occurrence_of.get(notice.job_id)
        if occurrence is None or notice.received <= killed_at:
            continue
        due = occurrence[1].timestamp()
        if due <= killed_at and notice.received - due > lease_s / 2:
            stranded[occurrence] = max(stranded.get(occurrence, 0.0), notice.received - killed_at)
    return {
        "gap_s": round(min(survivor_fires) - killed_at, 3) if survivor_fires else None,
        "killed": killed.name,
        "stranded_occurrences": len(stranded),
        "stranded_recovery_s": round(max(stranded.values()), 3) if stranded else None,
    }


def print_table(outcomes: Sequence[Outcome]) -> None:
    header = (
        f"{'scenario':9} {'config':8} {'n':>7} {'fires':>7} {'expect':>7} {'lost':>5} "
        f"{'dup':>4} {'seconds':>8} {'fires/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'cpu s':>6} {'gap s':>6} done"
    )
    print(header)
    for o in outcomes:
        late = o.lateness_ms

        def cell(value: float | None, width: int, digits: int = 1) -> str:
            return f"{'-':>{width}}" if value is None else f"{value:>{width},.{digits}f}"

        print(
            f"{o.scenario:9} {o.config:8} {o.n:>7,} {o.fires:>7,} {o.expected:>7,} "
            f"{o.lost:>5} {o.duplicated:>4} {cell(o.seconds, 8, 2)} {cell(o.fires_per_s, 8, 0)} "
            f"{cell(late.get('p50'), 8)} {cell(late.get('p99'), 8)} {cell(late.get('max'), 8)} "
            f"{cell(o.cpu_s, 6)} {cell(o.gap_s, 6, 2)} {'yes' if o.finished else 'NO'}"
        )


async def run_all(args: argparse.Namespace) -> list[Outcome]:
    outcomes: list[Outcome] = []
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-aps-") as tmp,
        LocalPostgres(DURABLE_AS_A_BROKER) as cluster,
    ):
        workdir = Path(tmp)
        for scenario in args.scenarios:
            for config in args.configs:
                sizes = args.sizes if scenario == "herd" else [args.steady_size]
                for n in sizes:
                    print(f"  {scenario} {config} N={n:,} …", flush=True)
                    if scenario == "herd":
                        outcome = await run_herd(cluster, n, config, args.timeout, workdir)
                    else:
                        outcome = await run_steady(
                            cluster,
                            n,
                            config,
                            window_s=args.window,
                            timeout_s=args.timeout,
                            workdir=workdir,
                            kill_after_s=args.kill_after if scenario == "failover" else None,
                        )
                    outcomes.append(outcome)
                    print_table([outcome])
                    if args.json:
                        write_outcomes(args.json, outcomes)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios", nargs="+", choices=["herd", "steady", "failover"], default=["herd"]
    )
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000], help="herd sizes")
    parser.add_argument(
        "--steady-size", type=int, default=10_000, help="schedules in steady and failover"
    )
    parser.add_argument("--window", type=float, default=90.0, help="steady/failover seconds")
    parser.add_argument(
        "--kill-after", type=float, default=20.0, help="failover: seconds into the window"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds from the herd instant or window start until every fire must be seen",
    )
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    args = parser.parse_args()
    if {"steady", "failover"} & set(args.scenarios) and args.window >= args.timeout:
        parser.error("--window must be shorter than --timeout")
    started = time.monotonic()
    outcomes = asyncio.run(run_all(args))
    print(f"\nall scenarios in {time.monotonic() - started:.0f}s")
    print_table(outcomes)


if __name__ == "__main__":
    main()
