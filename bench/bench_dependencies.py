"""What waiting for an upstream costs at a herd: the ticker's encoding and the executors' store.

Run: `.venv/bin/python -m bench.bench_dependencies [--runs 10000]`.

In one run:
- ticker: encode N fires of schedules that wait for an upstream (resolved from a book held in
  memory, as `UpstreamBook` answers once read) against N fires of plain schedules, which the
  encoder splices from per-definition bytes; microseconds a run and the ratio;
- store (SQLite, a fresh file each): admit N held runs waiting for one settlement against N
  plain runs; then, once the settlement succeeded, sweep the gate until every held run is
  released (each sweep is what one executor does once a second), against acquiring N plain
  ready runs 8 at a time. Printed: runs a second of each, the ratio, and how many sweeps (so
  seconds of an executor's cadence) the release of the herd takes;
- fairness: one run whose settlement succeeded, behind N held runs of another team in the
  round: sweeps until it is released with the success's news (the gate's first step) against
  the round alone (the news dropped before each sweep), in the same run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import OverlapPolicy, Schedule
from kairos.core.upstream_wait import UpstreamPeriod, resolve
from kairos.services.executor.upstream_gate import UpstreamGate
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.dedupe.base import AttemptResult, DedupeStore, RunRequest, SourceRecord
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import run_requested_record
from kairos.streams.wire.run_encoder import RunRequestedEncoder

T0 = datetime(2027, 1, 4, 7, 0, tzinfo=UTC)
BATCH = 500
CODEC = make_codecs().run_requested
SETTLE = Schedule.model_validate(
    {"id": "payments.settle", "cron": "0 7 * * *", "owner": "payments",
     "downstream_teams": ["ledger"]}
)  # fmt: skip


def _schedule(n: int, waits: bool, name: str = "ledger.export") -> Schedule:
    fields: dict[str, object] = {"id": f"{name}-{n}", "cron": "0 7 * * *", "owner": "ledger"}
    if waits:
        fields["upstream"] = [{"schedule": "payments.settle", "match": "same_instant"}]
    return Schedule.model_validate(fields)


class _Settled:
    """Every upstream is the settlement, known already (the ticker's book once read)."""

    def expect(self, schedule: Schedule) -> None:
        return

    def upstream_periods(self, decision: Decision, state: ScheduleState) -> list[UpstreamPeriod]:
        schedule = state.schedule
        return [
            resolve(schedule.owner, upstream, SETTLE, (decision.nominal, schedule.zone))
            for upstream in schedule.upstream
        ]


def ticker_us_per_run(runs: int, waits: bool) -> float:
    encoder = RunRequestedEncoder(CODEC, "bench-ticker", _Settled())
    states = [ScheduleState(_schedule(n, waits), n, T0) for n in range(runs)]
    decisions = [Decision(run_id(s.schedule_id, T0), s.schedule_id, T0, T0, Action.FIRE)
                 for s in states]  # fmt: skip
    for state, decision in zip(states, decisions, strict=True):
        encoder.prepare(state, 0, decision)
    started = time.perf_counter()
    for state, decision in zip(states, decisions, strict=True):
        encoder.encode(decision, state, fired_at=T0, partition=0)
    return (time.perf_counter() - started) / runs * 1e6


def _requests(
    runs: int, waits: bool, nominal: datetime = T0, name: str = "ledger.export"
) -> list[RunRequest]:
    """Runs fired at `nominal`; waiting ones await the settlement's period at their instant, as
    admission indexes them, and wait until 6 hours after T0 whatever their instant."""
    requests = []
    for n in range(runs):
        state = ScheduleState(_schedule(n, waits, name), n, nominal)
        decision = Decision(
            run_id(state.schedule_id, nominal), state.schedule_id, nominal, nominal, Action.FIRE
        )
        periods = _Settled().upstream_periods(decision, state)
        record = run_requested_record(
            decision, state, fired_at=T0, partition=n % 12, ticker_instance="bench",
            upstream=periods,
        )  # fmt: skip
        requests.append(
            RunRequest(
                run_id=decision.run_id, schedule_id=state.schedule_id, nominal_at=nominal,
                due_at=nominal, fired_at=T0, overlap=OverlapPolicy.ALLOW, max_attempts=3,
                retry_backoff=timedelta(seconds=10), runner="shell", value=CODEC.encode(record),
                source=SourceRecord("kairos.runs", n % 12, n),
                waits_until=T0 + timedelta(hours=6) if waits else None,
                awaits=tuple((p.schedule_id, p.period_at) for p in periods if p.period_at),
            )
        )  # fmt: skip
    return requests


def _admit(store: DedupeStore, requests: list[RunRequest]) -> float:
    started = time.perf_counter()
    for start in range(0, len(requests), BATCH):
        store.admit(requests[start : start + BATCH], T0, "bench")
    return len(requests) / (time.perf_counter() - started)


def _settle(store: DedupeStore) -> None:
    settle = _requests(1, waits=False)[0]
    settle = replace(settle, run_id=run_id("payments.settle", T0), schedule_id="payments.settle")
    store.admit([settle], T0, "bench")
    for lease in store.acquire("bench", {"shell"}, T0, timedelta(minutes=5), 1):
        store.finish(lease, AttemptResult(succeeded=True), T0)


def _acquire_all(store: DedupeStore, later: datetime) -> tuple[float, int]:
    started, done = time.perf_counter(), 0
    while leases := store.acquire("bench", {"shell"}, later, timedelta(minutes=5), 8):
        for lease in leases:
            store.finish(lease, AttemptResult(succeeded=True), later)
        done += len(leases)
    return done / (time.perf_counter() - started), done


def store_figures(root: Path, runs: int) -> dict[str, float]:
    plain = open_dedupe_store(sqlite_url(root / "plain.sqlite3"))
    held = open_dedupe_store(sqlite_url(root / "held.sqlite3"))
    try:
        figures = {"admit_plain": _admit(plain, _requests(runs, waits=False))}
        figures["admit_held"] = _admit(held, _requests(runs, waits=True))
        _settle(held)
        gate, sweeps, swept_s = UpstreamGate(held, CODEC, "bench"), 0, 0.0
        now = T0 + timedelta(minutes=1)
        while held.waiting_for_upstream(now, 1):
            started = time.perf_counter()
            gate.sweep(now)
            swept_s += time.perf_counter() - started
            sweeps += 1
        figures["release_held"] = runs / swept_s
        figures["sweeps"] = sweeps
        figures["acquire_plain"], _ = _acquire_all(plain, now)
        figures["acquire_released"], released = _acquire_all(held, now)
        assert released == runs, released
        return figures
    finally:
        plain.close()
        held.close()


def behind_the_round(root: Path, held: int, with_news: bool) -> tuple[int, float]:
    """Sweeps, and seconds of sweeping, until one run whose settlement succeeded is released,
    with `held` runs of another team held ahead of it in the round (waiting for yesterday's
    settlement, which never succeeds); without the news, the round alone finds it."""
    store = open_dedupe_store(sqlite_url(root / f"behind-{with_news}.sqlite3"))
    try:
        yesterday = T0 - timedelta(days=1)
        _admit(store, _requests(held, waits=True, nominal=yesterday, name="growth.import"))
        [target] = _requests(1, waits=True)
        store.admit([target], T0 + timedelta(seconds=1), "bench")  # checked after the others
        _settle(store)
        gate, sweeps, swept_s = UpstreamGate(store, CODEC, "bench"), 0, 0.0
        now = T0 + timedelta(minutes=1)
        while store.awaiting(("payments.settle", T0), "", 1):  # the target, until released
            if not with_news:
                store.take_upstream_news()
            started = time.perf_counter()
            gate.sweep(now)
            swept_s += time.perf_counter() - started
            sweeps += 1
        return sweeps, swept_s
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    runs = parser.parse_args().runs
    plain_us, waiting_us = ticker_us_per_run(runs, False), ticker_us_per_run(runs, True)
    print(f"ticker encode: plain {plain_us:.2f} us/run, waiting {waiting_us:.2f} us/run, "
          f"ratio {waiting_us / plain_us:.1f}x")  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        f = store_figures(Path(directory), runs)
    print(f"store admit: plain {f['admit_plain']:.0f} runs/s, held {f['admit_held']:.0f} "
          f"runs/s, ratio {f['admit_plain'] / f['admit_held']:.2f}x slower")  # fmt: skip
    print(f"release of {runs} held runs after the settlement: {f['release_held']:.0f} runs/s "
          f"of sweeping, {f['sweeps']:.0f} sweeps (one a second per executor)")  # fmt: skip
    print(f"acquire+finish: plain {f['acquire_plain']:.0f} runs/s, released "
          f"{f['acquire_released']:.0f} runs/s")  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        round_only = behind_the_round(Path(directory), runs, with_news=False)
        with_news = behind_the_round(Path(directory), runs, with_news=True)
    print(f"one run released behind {runs} held runs of another team: round only "
          f"{round_only[0]} sweeps ({round_only[1]:.2f} s of sweeping), with the success's "
          f"news {with_news[0]} sweep(s) ({with_news[1]:.3f} s); "
          f"{round_only[0] / with_news[0]:.0f}x fewer sweeps")  # fmt: skip


if __name__ == "__main__":
    main()
