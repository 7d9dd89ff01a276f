"""Where a ticker's memory lies at N held schedules, by allocator setting, split by `/proc` smaps.

Run: `.venv/bin/python -m bench.bench_ticker_memory [--size 1000000] [--settle 150]
[--variants default MALLOC_ARENA_MAX=2] [--restart] [--ticker-code <checkout>]
[--json bench/results/ticker-memory.json]`.

For each variant, in one run on a local broker this script starts and stops itself: a fresh
deployment, N every-minute schedules (`bench_steady`'s) published, one `kairos ticker` started
with the variant's environment added to its own, held, left firing `--settle` seconds, then its
resident memory read from `/proc/<pid>/smaps`; with `--restart`, stopped, started again on the
same store (a warm restore instead of the intake), settled and read again. `default` adds
nothing: it is the baseline of the run. A variant is `NAME=VALUE[,NAME=VALUE...]`. With
`--ticker-code <checkout>`, the checkout's ticker is measured first (variant `before`, nothing
added), a before/after of two codes in one run.

The split, in MB of resident memory:
- `arenas`: anonymous mappings starting on a 64 MiB boundary, the heaps glibc's malloc gives
  threads other than the main one (librdkafka's, RocksDB's, the metrics server's). A heuristic:
  any other anonymous mapping starting there by chance is counted too.
- `heap`: `[heap]`, the main thread's malloc arena.
- `anon`: every other anonymous mapping: CPython's object arenas (1 MiB each), large mallocs
  served by mmap, thread stacks.
- `files`: mappings of files (the interpreter, shared libraries, RocksDB's files read by mmap).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import (
    TickerProcess,
    deployment,
    local_broker,
    publish,
    start_ticker,
    steady_ids,
    steady_schedules,
    wait_until_held,
)
from kairos.streams.kafka.settings import KafkaSettings

_THREAD_HEAP_ALIGNMENT = 64 * 2**20
"""glibc's HEAP_MAX_SIZE on 64-bit: each heap of a non-main arena starts on this boundary."""


@dataclass(frozen=True)
class MemorySplit:
    rss: float
    arenas: float
    heap: float
    anon: float
    files: float


def memory_split(pid: int) -> MemorySplit:
    """Resident MB of process `pid` by kind of mapping (see the module's docstring)."""
    kinds = {"arenas": 0, "heap": 0, "anon": 0, "files": 0}
    kind = "anon"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        # A mapping's header: range, perms, offset, dev, inode and, if any, its path.
        if "-" in fields[0] and len(fields) >= 5:
            start = int(fields[0].split("-")[0], 16)
            path = fields[5] if len(fields) > 5 else ""
            if path == "[heap]":
                kind = "heap"
            elif path.startswith("/"):
                kind = "files"
            elif not path and start % _THREAD_HEAP_ALIGNMENT == 0:
                kind = "arenas"
            else:
                kind = "anon"
        elif fields[0] == "Rss:":
            kinds[kind] += int(fields[1])
    mb = {name: kb / 1024 for name, kb in kinds.items()}
    return MemorySplit(rss=sum(mb.values()), **mb)


def parse_variant(text: str) -> dict[str, str]:
    if text == "default":
        return {}
    pairs = [item.split("=", 1) for item in text.split(",")]
    if any(len(pair) != 2 or not pair[0] for pair in pairs):
        raise argparse.ArgumentTypeError(
            f"variant {text!r}: expected 'default' or NAME=VALUE[,NAME=VALUE...]"
        )
    return dict(pairs)


def _settled_split(ticker: TickerProcess, size: int, settle_s: float) -> tuple[float, MemorySplit]:
    """Seconds until `ticker` held `size`, and its memory `settle_s` after that."""
    started = time.monotonic()
    wait_until_held([ticker], size)
    held_s = time.monotonic() - started
    time.sleep(settle_s)
    return held_s, memory_split(ticker.process.pid)


def _print(variant: str, phase: str, held_s: float, split: MemorySplit) -> None:
    print(
        f"  {variant:<28} {phase:<8} held after {held_s:6.1f}s  RSS {split.rss:7,.0f} MB  "
        f"arenas {split.arenas:5,.0f}  heap {split.heap:5,.0f}  anon {split.anon:5,.0f}  "
        f"files {split.files:4,.0f}",
        flush=True,
    )


def measure(
    settings: KafkaSettings,
    variant: str,
    args: argparse.Namespace,
    workdir: Path,
    code: Path | None = None,
) -> list[dict[str, object]]:
    env = {} if variant == "before" else parse_variant(variant)
    state_dir = workdir / f"state-{len(list(workdir.glob('state-*')))}"
    rows: list[dict[str, object]] = []
    phases = ["intake", "restart"] if args.restart else ["intake"]
    for phase in phases:
        ticker = start_ticker(
            settings,
            f"memory-{state_dir.name}",
            state_dir,
            workdir / f"{state_dir.name}.log",
            env=env,
            code=code,
        )
        try:
            held_s, split = _settled_split(ticker, args.size, args.settle)
        finally:
            ticker.stop()
        _print(variant, phase, held_s, split)
        rows.append({"variant": variant, "phase": phase, "held_s": held_s, **asdict(split)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--settle", type=float, default=150, help="seconds firing before reading")
    parser.add_argument("--variants", nargs="+", default=["default", "MALLOC_ARENA_MAX=2"])
    parser.add_argument("--restart", action="store_true", help="read again after a restart")
    parser.add_argument("--ticker-code", type=Path, help="a checkout to measure before this one")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    for variant in args.variants:
        try:
            parse_variant(variant)
        except argparse.ArgumentTypeError as error:
            parser.error(str(error))
    rows: list[dict[str, object]] = []
    ids = steady_ids(args.size)
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        runs: list[tuple[str, Path | None]] = [(variant, None) for variant in args.variants]
        if args.ticker_code is not None:
            runs.insert(0, ("before", args.ticker_code))
        for number, (variant, code) in enumerate(runs):
            settings = deployment(broker.bootstrap_servers, f"memory{number}.")
            publish(settings, steady_schedules(ids))
            rows.extend(measure(settings, variant, args, Path(tmp), code))
            if args.json:
                args.json.write_text(json.dumps({"size": args.size, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
