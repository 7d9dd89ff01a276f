"""Owners' turns in the executors' store: a small team's runs beside another team's herd.

Run: `.venv/bin/python -m bench.bench_owner_fairness [--herd 300000] [--small 300]
[--slots 200] [--share 0.5]`.

One SQLite dedupe store (a temporary file) is given team `herd`'s runs, all due at one instant
and claimed at once; it is copied, so that both ways below drain the same store. A simulated
fleet of `--slots` places drains it, a simulated second at a time: every job lasts one second,
the runs started a second ago end (one UPDATE), team `small`'s runs are claimed as they fall
due (`--small` of them, spread evenly over the herd's length at the fleet's pace), then one
`acquire` fills the free places. Two ways, in the same process:

- due order: the store with its choice of runs as it was before owners' turns (`ORDER BY
  next_ms, nominal_ms`; the rest of `acquire` is the store's own), the baseline;
- turns: the store as it is (owners round-robin, `--share` of the pool per owner).

Printed for each: the small team's lateness (simulated seconds from due to start) p50, p99 and
max, the herd's last start, and the wall time of an acquire (mean and max) with the herd ready;
then the ratios of turns to due order. The plans SQLite chose for the turns' queries are printed
first: each owner's runs are read through `kairos_runs_by_owner`, not the whole ready set.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.outcome import percentiles
from kairos.core.concurrency import run_groups
from kairos.core.schedule import OverlapPolicy
from kairos.streams.dedupe.base import RunRequest, SourceRecord
from kairos.streams.dedupe.database import Connection
from kairos.streams.dedupe.sqlite import SqliteDedupeStore

T0 = datetime(2027, 1, 1, tzinfo=UTC)
LEASE = timedelta(minutes=5)
RUNNERS = frozenset({"shell"})
BATCH = 5_000
_END_RUNNING = "UPDATE kairos_runs SET state = 'succeeded' WHERE state = 'running'"


def request(owner: str, n: int, due: datetime) -> RunRequest:
    schedule_id = f"{owner}-{n:06d}"
    return RunRequest(
        run_id=f"{schedule_id}@{due:%Y-%m-%dT%H:%M:%SZ}",
        schedule_id=schedule_id,
        nominal_at=due,
        due_at=due,
        fired_at=due,
        overlap=OverlapPolicy.ALLOW,
        max_attempts=1,
        retry_backoff=timedelta(seconds=10),
        runner="shell",
        value=b"x" * 200,
        source=SourceRecord("kairos.runs", n % 12, n),
        groups=run_groups(owner, {"tier": "gold"}),
    )


class DueOrderStore(SqliteDedupeStore):
    """The store with its choice of runs as before owners' turns (no group is limited here):
    the ready runs due, in due order. Everything else an acquire does is the store's own."""

    def _startable(
        self, conn: Connection, now_ms: int, runners: Sequence[str], limit: int, share: float
    ) -> list[str]:
        rows = conn.execute(
            "SELECT run_id FROM kairos_runs WHERE state = 'ready' AND next_ms <= ? "
            f"AND runner IN ({', '.join('?' * len(runners))}) ORDER BY next_ms, nominal_ms "
            "LIMIT ?",
            (now_ms, *runners, limit),
        ).fetchall()
        return [run_id for (run_id,) in rows]


@dataclass
class Drain:
    started_at: dict[str, int] = field(default_factory=dict)
    """Each run's start, in simulated seconds from the herd's instant."""
    acquire_ms: list[float] = field(default_factory=list)


def drain(store: SqliteDedupeStore, args: argparse.Namespace) -> Drain:
    window = args.herd // args.slots
    small = [request("small", n, small_due(n, args)) for n in range(args.small)]
    result, second, running = Drain(), 0, 0
    while len(result.started_at) < args.herd + args.small:
        if second > 2 * window + 60:
            raise RuntimeError(f"{args.herd + args.small - len(result.started_at)} never started")
        now = T0 + timedelta(seconds=second)
        if running:
            store.statement(
                "UPDATE kairos_runs SET state = 'succeeded' WHERE state = 'running'", ()
            )
            store.statement("DELETE FROM kairos_outbox", ())
        due = [r for r in small if second - 1 < (r.due_at - T0).total_seconds() <= second]
        if due:
            store.admit([replace(r, fired_at=now) for r in due], now, "bench")
        began = time.perf_counter()
        leases = store.acquire("b", RUNNERS, now, LEASE, args.slots, owner_share=args.share)
        started = [lease.run_id for lease in leases]
        if len(result.started_at) < args.herd:
            result.acquire_ms.append((time.perf_counter() - began) * 1000)
        result.started_at |= dict.fromkeys(started, second)
        running, second = len(started), second + 1
    return result


def small_due(n: int, args: argparse.Namespace) -> datetime:
    return T0 + timedelta(seconds=n * (args.herd // args.slots) / args.small)


def report(label: str, drained: Drain, args: argparse.Namespace) -> dict[str, float]:
    late = [
        drained.started_at[request("small", n, small_due(n, args)).run_id]
        - (small_due(n, args) - T0).total_seconds()
        for n in range(args.small)
    ]
    lateness = percentiles(late)
    herd_last = max(s for r, s in drained.started_at.items() if r.startswith("herd-"))
    figures = {
        "p50": lateness["p50"],
        "p99": lateness["p99"],
        "max": lateness["max"],
        "herd_last": float(herd_last),
        "acquire_mean_ms": statistics.mean(drained.acquire_ms),
        "acquire_max_ms": max(drained.acquire_ms),
    }
    print(
        f"  {label:>9}: small late p50 {figures['p50']:,.1f} s p99 {figures['p99']:,.1f} s "
        f"max {figures['max']:,.1f} s; herd's last start {herd_last:,} s; acquire "
        f"{figures['acquire_mean_ms']:.2f} ms mean, {figures['acquire_max_ms']:.1f} ms max"
    )
    return figures


def show_plans(store: SqliteDedupeStore) -> None:
    """What SQLite does for the turns' two reads (they are the store's own statements)."""
    statements = {
        "owners": "WITH RECURSIVE owners (owner) AS (SELECT MIN(owner) FROM kairos_runs "
        "WHERE state = 'ready' UNION ALL SELECT (SELECT MIN(r.owner) FROM kairos_runs r "
        "WHERE r.state = 'ready' AND r.owner > o.owner) FROM owners o WHERE o.owner IS NOT NULL) "
        "SELECT owner FROM owners WHERE owner IS NOT NULL",
        "heads": "SELECT * FROM (SELECT run_id, owner, next_ms, nominal_ms FROM kairos_runs "
        "WHERE state = 'ready' AND owner = 'herd' AND next_ms <= 0 AND runner IN ('shell') "
        "ORDER BY next_ms, nominal_ms LIMIT 8) h0",
    }
    for name, sql in statements.items():
        plan = store.statement(f"EXPLAIN QUERY PLAN {sql}", ()).fetchall()
        print(f"  plan of {name}: " + " | ".join(str(row[-1]) for row in plan))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--herd", type=int, default=300_000)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--share", type=float, default=0.5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed.sqlite3"
        store = SqliteDedupeStore(seed)
        began = time.perf_counter()
        herd = [request("herd", n, T0) for n in range(args.herd)]
        for first in range(0, args.herd, BATCH):
            store.admit(herd[first : first + BATCH], T0, "bench")
        print(
            f"herd {args.herd:,} due at one instant, small {args.small} spread over "
            f"{args.herd // args.slots:,} s, {args.slots} places, jobs of 1 s "
            f"(claimed in {time.perf_counter() - began:.0f} s)"
        )
        show_plans(store)
        store.close()
        results = {}
        for label, kind in [("due order", DueOrderStore), ("turns", SqliteDedupeStore)]:
            copy = Path(tmp) / f"{label.replace(' ', '-')}.sqlite3"
            shutil.copy(seed, copy)
            store = kind(copy)
            results[label] = report(label, drain(store, args), args)
            store.close()
    base, now = results["due order"], results["turns"]
    print(
        "  turns / due order: "
        + ", ".join(
            f"{key} {now[key] / base[key]:.4f}x" if base[key] else f"{key} {now[key]:.2f} vs 0"
            for key in ("p50", "p99", "max", "herd_last", "acquire_mean_ms")
        )
    )


if __name__ == "__main__":
    main()
