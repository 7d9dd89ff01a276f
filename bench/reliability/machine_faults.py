"""The scenarios beyond brokers: tickers, executors and the dedupe store failing under load."""

from __future__ import annotations

import errno
import random
import shutil
import signal
import time

from bench.reliability.scenario import Scenario
from bench.reliability.system import System

EXECUTOR_KILLS = 10
EXECUTOR_KILL_EVERY_S = 14
TICKER_STOP_S = 25
"""Past the tickers' session timeout (10 s, the product's default), so the group moves the
stopped ticker's partitions while a broker restarts."""
FILLER = "disk-full-filler"


def _jobs_in_flight(system: System) -> int:
    """Shell jobs started and not ended, from the journal they write."""
    try:
        lines = system.shell_journal.read_text().splitlines()
    except FileNotFoundError:
        return 0
    started = {tuple(line.split()[1:3]) for line in lines if line.startswith("start ")}
    ended = {tuple(line.split()[1:3]) for line in lines if line.startswith("end ")}
    return len(started - ended)


def _kill_executors(system: System, rng: random.Random) -> list[str]:
    steps = []
    for kill in range(EXECUTOR_KILLS):
        victim = rng.choice(system.executors)
        with victim.control:
            in_flight = _jobs_in_flight(system)
            victim.kill()
            steps.append(
                f"kill {kill + 1}: SIGKILL executor {victim.name}, {in_flight} shell jobs running"
            )
            time.sleep(2)
            victim.start()
        time.sleep(EXECUTOR_KILL_EVERY_S - 2)
    return steps


def _stop_ticker_during_broker_restart(system: System, rng: random.Random) -> list[str]:
    ticker = rng.choice(system.tickers)
    broker = rng.choice(system.running_brokers())
    began = time.monotonic()
    ticker.send(signal.SIGSTOP)
    system.stop_broker(broker)
    system.start_brokers()
    time.sleep(max(0.0, TICKER_STOP_S - (time.monotonic() - began)))
    ticker.send(signal.SIGCONT)
    return [
        f"SIGSTOP ticker {ticker.name}; broker {broker} restarted (SIGTERM, start, in sync); "
        f"SIGCONT after {time.monotonic() - began:.0f} s"
    ]


def _restart_postgres(system: System, rng: random.Random) -> list[str]:
    mode = rng.choice(("fast", "immediate"))
    began = time.monotonic()
    system.postgres.restart(mode)
    return [f"PostgreSQL restarted (pg_ctl -m {mode}) in {time.monotonic() - began:.1f} s"]


def _delete_ticker_state(system: System, rng: random.Random) -> list[str]:
    ticker = rng.choice(system.tickers)
    with ticker.control:
        ticker.kill()
        shutil.rmtree(system.state_dir(ticker.name))
        ticker.start()
    return [f"SIGKILL ticker {ticker.name}, its state directory deleted, started again (cold)"]


def _fill_ticker_disk(system: System, rng: random.Random) -> list[str]:
    """Fill the small file system the second ticker's state lives on, until writes fail."""
    ticker = system.tickers[1]
    assert system.small_disk is not None
    filler = system.small_disk / FILLER
    written = 0
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as out:
        try:
            while True:
                out.write(chunk)
                out.flush()
                written += len(chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    time.sleep(60)
    alive = "still running" if ticker.alive() else "exited"
    filler.unlink()
    return [
        f"state file system of ticker {ticker.name} filled ({written >> 20} MiB) for 60 s; "
        f"the ticker {alive}; space freed"
    ]


MACHINE_SCENARIOS = (
    Scenario(
        "ticker-state-deleted",
        "SIGKILL of a ticker and its state directory deleted: a cold restore from the changelog",
        "The compacted changelog holds the latest state of every key; read_committed shows only "
        "committed transactions.",
        _delete_ticker_state,
    ),
    Scenario(
        "ticker-disk-full",
        "The file system of a ticker's state directory full for 60 s",
        "Nothing of Kafka's: the broker's disks are not involved.",
        _fill_ticker_disk,
    ),
    Scenario(
        "executors-killed",
        f"SIGKILL of a random executor {EXECUTOR_KILLS} times, every {EXECUTOR_KILL_EVERY_S} s, "
        "mid-job",
        "Offsets committed are kept; records after them are delivered again (at least once).",
        _kill_executors,
        window_s=180,
    ),
    Scenario(
        "ticker-stopped-broker-restart",
        f"SIGSTOP of a ticker for {TICKER_STOP_S} s (past its session timeout) while a broker "
        "restarts",
        "A member that misses its session timeout is removed; its transactional id is fenced "
        "when its partitions' new owner initialises transactions.",
        _stop_ticker_during_broker_restart,
    ),
    Scenario(
        "postgres-restarted",
        "The executors' PostgreSQL dedupe store restarted under load",
        "Nothing of Kafka's: the executors' offsets wait for the store.",
        _restart_postgres,
    ),
)
