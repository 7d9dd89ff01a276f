"""RocksDB's memory for a ticker's partition stores: one shared limit against RocksDB's defaults.

Run: `.venv/bin/python -m bench.bench_store_memory [--sizes 1000000] [--megabytes 64]`.

For each N, two fresh processes (one each, so each RSS is its own) write N schedules'
definition and progress into twelve partition stores, in batches of 1,000 as commits and
restores do: one with the stores sharing `StoreMemory(--megabytes)` (the ticker's), one with
RocksDB's default options (a memtable of up to 64 MB and a block cache per store). Printed: wall
time, CPU of the process with RocksDB's background threads (flushes, compactions), RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from rocksdict import Options

from kairos.streams.state.state_store import PartitionStore, StateWrite, StoreMemory

PARTITIONS = 12
BATCH = 1_000
DEFINITION_BYTES = 180
"""About a daily schedule's changelog definition value."""


class RocksDefaults(StoreMemory):
    """The baseline: each store with RocksDB's own defaults, nothing shared or bounded."""

    def options(self) -> Options:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        return options


def write_stores(size: int, megabytes: int, bounded: bool, root: Path) -> dict[str, float]:
    memory = StoreMemory(megabytes) if bounded else RocksDefaults(megabytes)
    stores = [PartitionStore(root / str(n), memory) for n in range(PARTITIONS)]
    definition = os.urandom(DEFINITION_BYTES)
    progress = bytes(40)
    process = psutil.Process()
    started, cpu_before = time.monotonic(), sum(process.cpu_times()[:2])
    for batch in range(size // BATCH):
        writes = [
            StateWrite(f"store-{batch:05d}-{n:03d}", definition, progress, 1_800_000_000_000 + n)
            for n in range(BATCH)
        ]
        stores[batch % PARTITIONS].apply(writes, changelog_offset=batch + 1)
    wall_s = time.monotonic() - started
    time.sleep(3)  # flushes and compactions the writes started
    return {
        "wall_s": wall_s,
        "cpu_s": sum(process.cpu_times()[:2]) - cpu_before,
        "rss_mb": process.memory_info().rss / 2**20,
    }


def measure_in_child(size: int, megabytes: int, bounded: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="kairos-store-memory-") as tmp:
        mode = "bounded" if bounded else "defaults"
        args = [sys.executable, "-m", "bench.bench_store_memory", "--child", mode, tmp]
        args += ["--sizes", str(size), "--megabytes", str(megabytes)]
        answer = subprocess.run(args, capture_output=True, text=True, check=True)
        result: dict[str, float] = json.loads(answer.stdout)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        mode, root = args.child
        result = write_stores(args.sizes[0], args.megabytes, mode == "bounded", Path(root))
        print(json.dumps(result))
        return
    for size in args.sizes:
        base = measure_in_child(size, args.megabytes, bounded=False)
        ours = measure_in_child(size, args.megabytes, bounded=True)
        for name, result in (("rocksdb defaults", base), (f"{args.megabytes} MB shared", ours)):
            print(
                f"  N={size:>9,}  {name:>16}  wall {result['wall_s']:5.1f}s  "
                f"CPU {result['cpu_s']:5.1f}s  RSS {result['rss_mb']:5.0f} MB",
                flush=True,
            )
        print(
            f"  N={size:>9,}  shared/defaults: RSS {ours['rss_mb'] / base['rss_mb']:.2f}  "
            f"CPU {ours['cpu_s'] / base['cpu_s']:.2f}  wall {ours['wall_s'] / base['wall_s']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
