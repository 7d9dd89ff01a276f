"""Where a ticker's time goes: py-spy on it during a herd or under steady load.

Run: `.venv/bin/python -m bench.profile_ticker herd|steady [--size 300000] [--seconds 8]
[--out profile.txt]`.

On a local broker this script starts and stops itself, N schedules are published and one ticker
takes them in. Then `py-spy record --format raw` samples the ticker for `--seconds`:

- `herd`: N schedules `* * * * *`, sampled from just before the first minute boundary the ticker
  meets idle (as `bench_herd`).
- `steady`: N schedules `* * * * *` spread over the minute by their jitter (as `bench_steady`),
  sampled from the first minute boundary at least `--warmup` seconds after the ticker holds them
  all, once it fires as it does day after day.

The raw stacks are kept in `--out`; the table printed is each function's share of the samples
taken inside the ticker's loop, inclusive (the function or anything it called) and self (the
function itself). With `--idle`, samples of threads waiting (in Kafka round trips, say) count
too. py-spy pauses the process to sample it, so a profiled ticker is slower than the
benchmarks': compare shares, not seconds.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.bench_herd import quiet_minute
from bench.common import (
    deployment,
    local_broker,
    minute_after,
    publish,
    sleep_until,
    start_ticker,
    steady_ids,
    steady_schedules,
    wait_until_held,
)
from kairos.core.schedule import Schedule

_LOOP = "Ticker.turn"
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """`function (path/file.py:line)` → `function file.py`."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    return f"{match['function']} {Path(match['file']).name}"


def shares(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """Samples inside the loop, and per function its inclusive and self sample counts."""
    total, inclusive, own = 0, Counter[str](), Counter[str]()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue  # a line py-spy cut short when it was stopped
        frames = [frame_name(frame) for frame in stack.split(";")]
        loop = next((n for n, name in enumerate(frames) if name.startswith(_LOOP + " ")), None)
        if loop is None:
            continue
        frames = frames[loop:]  # what the loop called, not what called the loop
        samples = int(count)
        total += samples
        for name in set(frames):
            inclusive[name] += samples
        own[frames[-1]] += samples
    return total, inclusive, own


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=["herd", "steady"])
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument("--seconds", type=int, default=8, help="how long py-spy samples")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--warmup", type=int, default=60, help="steady: seconds before sampling")
    parser.add_argument("--idle", action="store_true", help="count waiting threads' samples")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--out", type=Path, default=Path("profile.txt"))
    return parser


def scenario_schedules(scenario: str, size: int) -> Iterable[Schedule]:
    if scenario == "herd":
        return (Schedule(id=f"herd-{n:07d}", cron="* * * * *") for n in range(size))
    return steady_schedules(steady_ids(size))


def sampling_start(args: argparse.Namespace, log: Path) -> datetime:
    """The herd's quiet minute boundary, or the steady minute after the warm-up."""
    if args.scenario == "herd":
        first = minute_after(datetime.now(UTC) + timedelta(seconds=3))
        return quiet_minute(log, first) - timedelta(seconds=0.1)
    return minute_after(datetime.now(UTC) + timedelta(seconds=args.warmup))


def record(pid: int, args: argparse.Namespace) -> None:
    """py-spy's raw stacks of the process into `args.out`."""
    py_spy = Path(sys.executable).with_name("py-spy")
    subprocess.run(
        [
            str(py_spy),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(args.rate),
            "--duration",
            str(args.seconds),
            "--format",
            "raw",
            *(["--idle"] if args.idle else []),
            "-o",
            str(args.out),
        ],
        check=True,
        capture_output=True,
    )


def start_sampling(pid: int, out: Path, rate: int = 100) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` into `out` (raw stacks) until `stop_sampling`."""
    py_spy = Path(sys.executable).with_name("py-spy")
    options = ["--rate", str(rate), "--format", "raw", "--nonblocking", "-o", str(out)]
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_sampling(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled
        spy.wait(timeout=60)


def print_shares(out: Path, top: int) -> None:
    total, inclusive, own = shares(out.read_text())
    print(f"{total} samples inside {_LOOP}; raw stacks in {out}")
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"--- {title}")
        for name, samples in counts.most_common(top):
            print(f"{samples / total:6.1%}  {name}")


def main() -> None:
    args = argument_parser().parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="kairos-profile-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        settings = deployment(broker.bootstrap_servers, "profile.")
        publish(settings, scenario_schedules(args.scenario, args.size))
        log = Path(tmp) / "ticker.log"
        # The herd finds its quiet minute in the transactions the ticker logs at DEBUG.
        level = "DEBUG" if args.scenario == "herd" else "INFO"
        ticker = start_ticker(settings, "profile", Path(tmp) / "state", log, log_level=level)
        try:
            wait_until_held([ticker], args.size)
            start = sampling_start(args, log)
            sleep_until(start)
            print(
                f"{args.scenario} of {args.size:,} from {start:%H:%M:%S}Z; sampling {args.seconds}s"
            )
            record(ticker.process.pid, args)
        finally:
            ticker.stop()
    print_shares(args.out, args.top)


if __name__ == "__main__":
    main()
