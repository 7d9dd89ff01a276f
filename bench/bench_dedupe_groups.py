"""What concurrency groups cost the dedupe store: admit, acquire and finish N runs three ways.

Run: `.venv/bin/python -m bench.bench_dedupe_groups [--runs 20000] [--postgres]`.

In one run, on fresh stores of the same kind (SQLite files in a temporary directory, or with
`--postgres` databases of a throwaway local PostgreSQL cluster):
- baseline: runs without groups, as before concurrency groups;
- grouped: each run in its owner's group and two label groups, no group limited;
- limited: the same, with the owner's group limited to the executor's slots (nothing waits).
Each admits the runs in batches of 500 (as the executor does), then acquires 8 at a time and
finishes them. Printed: runs per second of each phase and each way's ratio to the baseline.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kairos.core.concurrency import run_groups
from kairos.core.schedule import OverlapPolicy
from kairos.devinfra.postgres import LocalPostgres
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.dedupe.base import AttemptResult, DedupeStore, RunRequest, SourceRecord

T0 = datetime(2027, 1, 1, tzinfo=UTC)
SLOTS = 8
BATCH = 500


def _requests(runs: int, grouped: bool) -> list[RunRequest]:
    requests = []
    for n in range(runs):
        nominal = T0 + timedelta(seconds=n)
        request = RunRequest(
            run_id=f"bench-{n % 1000}@{nominal:%Y-%m-%dT%H:%M:%SZ}",
            schedule_id=f"bench-{n % 1000}",
            nominal_at=nominal,
            due_at=nominal,
            fired_at=nominal,
            overlap=OverlapPolicy.ALLOW,
            max_attempts=3,
            retry_backoff=timedelta(seconds=10),
            runner="shell",
            value=b"x" * 200,
            source=SourceRecord("kairos.runs", n % 12, n),
        )
        groups = run_groups(f"team{n % 100}", {"tier": "gold", "region": "eu"})
        requests.append(replace(request, groups=groups) if grouped else request)
    return requests


def _timed(work: Callable[[], int]) -> float:
    started = time.perf_counter()
    done = work()
    return done / (time.perf_counter() - started)


def measure(store: DedupeStore, requests: list[RunRequest]) -> tuple[float, float]:
    """(admitted runs/s, acquired-and-finished runs/s)."""

    def admit() -> int:
        for start in range(0, len(requests), BATCH):
            store.admit(requests[start : start + BATCH], T0, "bench")
        return len(requests)

    def run() -> int:
        done = 0
        later = T0 + timedelta(days=1)
        while leases := store.acquire("bench", {"shell"}, later, timedelta(minutes=5), SLOTS):
            for lease in leases:
                store.finish(lease, AttemptResult(succeeded=True), later)
            done += len(leases)
        return done

    return _timed(admit), _timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL, not SQLite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        cluster = stack.enter_context(LocalPostgres()) if args.postgres else None
        results = {}
        for way in ("baseline", "grouped", "limited"):
            url = cluster.create_database() if cluster else sqlite_url(Path(tmp) / f"{way}.db")
            store = open_dedupe_store(url)
            if way == "limited":
                for team in range(100):
                    store.set_concurrency_limit(f"owner:team{team}", SLOTS, T0)
            results[way] = measure(store, _requests(args.runs, grouped=way != "baseline"))
            store.close()
    base_admit, base_run = results["baseline"]
    print(f"{args.runs:,} runs on {'PostgreSQL' if args.postgres else 'SQLite'}")
    for way, (admitted, ran) in results.items():
        print(
            f"  {way:>8}: admit {admitted:8,.0f} runs/s ({admitted / base_admit:.2f}x)  "
            f"acquire+finish {ran:8,.0f} runs/s ({ran / base_run:.2f}x)"
        )


if __name__ == "__main__":
    main()
