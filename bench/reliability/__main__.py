"""The broker-fault suite: the promise through a cluster's failures, with figures.

Run: `.venv/bin/python -m bench.reliability [--seed 1] [--size 10000] [--scenarios NAME …]
[--json bench/results/reliability.json]` (as root for the disk-full scenario, which mounts a
small tmpfs). On a three-broker cluster, PostgreSQL, two tickers and two executors it starts
itself, under the load of `bench.reliability.load`, each scenario runs its fault inside a window
of steady load and is judged by `kairos audit verify --outcomes` and the effects table: lost,
committed twice, executed twice, and the lateness a read_committed consumer saw. The same seed
picks the same victims and instants in the same order (the cluster's own choices, such as which
broker leads what, are the cluster's). docs/reliability.md holds the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench.outcome import machine
from bench.reliability import scenario
from bench.reliability.broker_faults import BROKER_SCENARIOS
from bench.reliability.machine_faults import MACHINE_SCENARIOS
from bench.reliability.scenario import Scenario, ScenarioResult
from bench.reliability.system import REPO, System

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (*BROKER_SCENARIOS, *MACHINE_SCENARIOS)}
WARMUP_S = 20


def _line(result: ScenarioResult) -> str:
    late = result.lateness_ms
    return (
        f"{result.name:<30} {result.verdict:<12} expected {result.expected:>6,} "
        f"fired {result.fired:>6,} lost {result.lost} twice {result.committed_twice} "
        f"executed twice {result.executed_twice} unfinished {result.unfinished}  lateness ms "
        f"p50 {late.get('p50', 0):,.0f} p99 {late.get('p99', 0):,.0f} max {late.get('max', 0):,.0f}"
    )


def _commit() -> str:
    """The commit the suite ran, `+dirty` when the work tree differed from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain") else "")


def _write(path: Path | None, args: argparse.Namespace, results: list[ScenarioResult]) -> None:
    if path is None:
        return
    document = {
        "machine": machine(),
        "commit": _commit(),
        "seed": args.seed,
        "size": args.size,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "results": [asdict(r) for r in results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def _one(system: System, chosen: Scenario, rng: random.Random, prefix: str) -> ScenarioResult:
    """Deploy afresh, let it settle, run the scenario, and take the deployment down."""
    published = system.deploy(datetime.now(UTC), prefix)
    print(f"{prefix} published {system.size:,} schedules in {published:.1f} s", flush=True)
    try:
        system.wait_until_firing()
        time.sleep(WARMUP_S)
        return scenario.run(system, chosen, rng)
    finally:
        system.undeploy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (logs)")
    args = parser.parse_args()
    # Stopped with SIGTERM (a timeout, an operator), still stop every process it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    results: list[ScenarioResult] = []
    with tempfile.TemporaryDirectory(prefix="kairos-reliability-") as tmp:
        workdir = args.keep or Path(tmp)
        system = System(workdir, seed=args.seed, size=args.size, small_disk=True)
        try:
            began = time.monotonic()
            system.start()
            for number, name in enumerate(args.scenarios, 1):
                if name == "ticker-disk-full" and system.small_disk is None:
                    print(f"{name}: not run (needs root to mount a small tmpfs)", flush=True)
                    continue
                try:
                    results.append(_one(system, SCENARIOS[name], rng, f"reliability-{number}."))
                except Exception as failure:
                    # The harness failed, not the promise: say so and go on with the others.
                    print(f"{name}: not measured, the harness failed: {failure!r}", flush=True)
                    system.heal()
                    continue
                print(_line(results[-1]), flush=True)
                _write(args.json, args, results)
            print(f"suite done in {(time.monotonic() - began) / 60:.0f} min", flush=True)
        finally:
            system.stop()


if __name__ == "__main__":
    main()
