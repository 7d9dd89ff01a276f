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
import math
import signal
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from celery.schedules import crontab
from redbeat.schedules import rrule

from bench.outcome import Outcome, percentiles, process_tree_cpu_s, write_outcomes
from bench.redbeat_beats import BeatConfig, beats
from bench.redbeat_entries import arm_entries, write_definitions
from bench.redbeat_fires import FireLog, SlotTally, observing, tally_slots
from bench.redis_server import redis_server

# Seconds a `celery beat` takes from exec to holding the lock on an idle machine is ~1.5; the
# margin absorbs a loaded one (the lead's other benchmarks share the two cores).
BEAT_STARTUP_S = 8.0
POLL_S = 0.5
CONFIG_NAMES = ("tuned", "default")


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
class SteadyRun:
    tally: SlotTally
    cpu_s: float
    redis_cpu_s: float
    gap_s: float | None
    beat_failures: list[str]
    write_s: float


@dataclass(frozen=True)
class SpreadLoad:
    """The steady entries, as written: each fires every `period` s, its first slot at
    `first_slot`; the slots in `window` are counted, every one from its start on is owed."""

    names: list[str]
    period: int
    first_slot: dict[str, float]
    window: tuple[float, float]

    @property
    def last_run_at(self) -> float:
        """The last run every entry is armed with: none of the window's slots is covered."""
        return self.window[0] - 0.001

    def first_owed(self, name: str) -> float:
        first = self.first_slot[name]
        return first + math.ceil((self.window[0] - first) / self.period) * self.period

    def last_slot(self, name: str) -> float:
        first = self.first_slot[name]
        return first + (math.ceil((self.window[1] - first) / self.period) - 1) * self.period


def set_up_spread(
    client: redis.Redis, n: int, args: argparse.Namespace, *, failover: bool
) -> tuple[SpreadLoad, float]:
    """Write and arm N entries spread over the period; the load and the seconds writing took."""
    period: int = args.period
    names = [f"steady-{index:07d}" for index in range(n)]
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
    spread = SpreadLoad(
        names,
        period,
        first_slot={name: anchor.timestamp() + index % period for index, name in enumerate(names)},
        window=(float(window_start), float(window_start + args.window)),
    )
    last_run_at = datetime.fromtimestamp(spread.last_run_at, UTC)
    arm_entries(client, names, last_run_at, lambda index: spread.first_owed(names[index]))
    return spread, write_s


def run_spread(
    n: int, config: BeatConfig, args: argparse.Namespace, workdir: Path, *, failover: bool
) -> SteadyRun:
    with redis_server() as server, observing(server, workdir) as fire_log:
        client = server.client()
        spread, write_s = set_up_spread(client, n, args, failover=failover)
        window = spread.window
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
            wait_for_every_last_slot(fire_log, spread, deadline=window[0] + args.timeout)
            # The SIGKILLed holder did not fail; only a beat that exited by itself did.
            failures = [
                failure
                for beat in (running[1:] if failover else running)
                if (failure := beat.failure()) is not None
            ]
    gap_s = None if killed_at is None else gap_after_kill(fire_log, running[1].pid, killed_at)
    arrivals = fire_log.arrivals_by_entry()
    tally = tally_slots(arrivals, spread.first_slot, spread.period, spread.last_run_at, window)
    return SteadyRun(
        tally, cpu.seconds(beat_pids), cpu.seconds([server.pid]), gap_s, failures, write_s
    )


def wait_for_every_last_slot(fire_log: FireLog, spread: SpreadLoad, deadline: float) -> None:
    """Until every entry has fired for its last slot in the window, or `deadline` passes."""
    last_slot_of = {name: spread.last_slot(name) for name in spread.names}
    while time.time() < deadline:
        fire_log.refresh()
        if all(fire_log.latest.get(name, 0.0) >= last_slot_of[name] for name in spread.names):
            return
        time.sleep(POLL_S)


def gap_after_kill(fire_log: FireLog, survivor_pid: int, killed_at: float) -> float | None:
    """From the kill to the survivor's first fire; None if it never fired."""
    survivor_fires = [
        fire.arrived
        for fire in fire_log.fires
        if fire.beat_pid == survivor_pid and fire.arrived >= killed_at
    ]
    return min(survivor_fires) - killed_at if survivor_fires else None


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


def add_scenario_options(parser: argparse.ArgumentParser) -> None:
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


def add_window_options(parser: argparse.ArgumentParser) -> None:
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


def run_all(args: argparse.Namespace) -> list[Outcome]:
    """Every scenario, size and config, one after the other, each printed as it ends."""
    configs = {
        "tuned": BeatConfig("tuned", args.tuned_lock_timeout, args.tuned_max_loop_interval),
        "default": BeatConfig("default", lock_timeout_s=None, max_loop_interval_s=None),
    }
    outcomes: list[Outcome] = []
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
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_scenario_options(parser)
    add_window_options(parser)
    args = parser.parse_args()
    if {"steady", "failover"} & set(args.scenarios) and args.window > args.timeout:
        parser.error("need --window <= --timeout")
    if "failover" in args.scenarios and args.kill_after >= args.window:
        parser.error("need --kill-after < --window")
    started = time.monotonic()
    outcomes = run_all(args)
    print(f"\nredbeat: {time.monotonic() - started:.0f}s in all\n{TABLE_HEADER}")
    for outcome in outcomes:
        print(format_row(outcome))


if __name__ == "__main__":
    main()
