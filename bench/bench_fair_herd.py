"""Fair herds: one team's herd and ten small teams' schedules due at the same instant.

Run: `.venv/bin/python -m bench.bench_fair_herd [--bulk 300000] [--teams 10] [--per-team 100]
[--ticker-code DIR] [--json out.json] [--logs DIR]`.

On a local broker this script starts and stops itself, for each ticker measured (the checkout
given by `--ticker-code` first, when given, then this one), on a deployment of its own:

1. `--bulk` schedules `* * * * *` owned by team `bulk` are published, then `--teams` teams of
   `--per-team` each (`team0` ...), so the small teams' schedules come last in every
   partition's index, as a team onboarded after a big one would.
2. One ticker process takes them in; at the first minute boundary it meets idle, all fall due.
3. A read_committed consumer stamps each run as it becomes visible: its lateness is that instant
   minus its due instant. Printed per group (the bulk team, the small teams): p50, p99, max.

The small teams' p99 is the figure fairness moves: behind the bulk in index order it is the
whole herd's length; interleaved by owner it is the first transaction's.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.bench_herd import quiet_minute
from bench.common import (
    RunsObserver,
    deployment,
    local_broker,
    minute_after,
    publish,
    start_ticker,
    wait_until_held,
)
from bench.outcome import Outcome, percentiles, write_outcomes
from kairos.core.schedule import Schedule


def _schedules(bulk: int, teams: int, per_team: int) -> Iterator[Schedule]:
    for n in range(bulk):
        yield Schedule(id=f"bulk-{n:07d}", cron="* * * * *", owner="bulk")
    for team in range(teams):
        for n in range(per_team):
            yield Schedule(id=f"team{team}-{n:04d}", cron="* * * * *", owner=f"team{team}")


def measure(
    bootstrap: str, workdir: Path, label: str, code: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    total = args.bulk + args.teams * args.per_team
    settings = deployment(bootstrap, f"fair-{label}-{int(time.time())}.")
    publish_s = publish(settings, _schedules(args.bulk, args.teams, args.per_team))
    log_path = workdir / f"ticker-{label}.log"
    ticker = start_ticker(
        settings,
        f"fair-{label}",
        workdir / f"state-{label}",
        log_path,
        log_level="DEBUG",
        code=code,
    )
    try:
        wait_until_held([ticker], total)
        candidate = minute_after(datetime.now(UTC) + timedelta(seconds=3))
        observer = RunsObserver(settings, keep_from=time.time())
        herd_at = quiet_minute(log_path, candidate)
        schedules = _schedules(args.bulk, args.teams, args.per_team)
        expected = {f"{s.id}@{herd_at:%Y-%m-%dT%H:%M:%SZ}" for s in schedules}
        unseen = observer.wait_for(expected, deadline=time.monotonic() + 600)
        observer.stop()
    finally:
        ticker.stop()
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(log_path, args.logs / log_path.name)
    if unseen:
        raise RuntimeError(f"{len(unseen)} runs of the herd were not seen; see {log_path}")
    lateness: dict[str, list[float]] = {"bulk": [], "small": []}
    for seen in observer.observations():
        if seen.run_id in expected:
            group = "bulk" if seen.run_id.startswith("bulk-") else "small"
            lateness[group].append((seen.seen_at - seen.due_at) * 1000)
    result = {group: percentiles(values) for group, values in lateness.items()}
    print(
        f"  {label:>6}: published in {publish_s:.0f}s; herd at {herd_at:%H:%M:%S}Z  "
        + "  ".join(
            f"{group} p50 {r['p50']:,.0f} ms p99 {r['p99']:,.0f} ms max {r['max']:,.0f} ms"
            for group, r in result.items()
        )
    )
    return {"label": label, "herd_at": herd_at.isoformat(), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bulk", type=int, default=300_000)
    parser.add_argument("--teams", type=int, default=10)
    parser.add_argument("--per-team", type=int, default=100)
    parser.add_argument("--ticker-code", type=Path, help="a checkout to measure before this one")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, help="a directory to keep the tickers' logs in")
    args = parser.parse_args()
    runs = [("before", args.ticker_code)] if args.ticker_code else []
    runs.append(("now", None))
    results = []
    with tempfile.TemporaryDirectory() as tmp, local_broker(Path(tmp)) as broker:
        assert broker.bootstrap_servers is not None
        print(f"bulk {args.bulk:,} + {args.teams} teams x {args.per_team} due at one instant")
        for label, code in runs:
            results.append(measure(broker.bootstrap_servers, Path(tmp), label, code, args))
    if args.json:
        outcomes = [
            Outcome(
                system="kairos",
                scenario="fair-herd",
                n=args.bulk + args.teams * args.per_team,
                config=result["label"],
                lateness_ms=result["small"],
                extra={"bulk_lateness_ms": result["bulk"], "herd_at": result["herd_at"]},
            )
            for result in results
        ]
        write_outcomes(args.json, outcomes)


if __name__ == "__main__":
    main()
