"""Where a herd's time goes: py-spy on the ticker while N schedules due at one instant fire.

Run: `.venv/bin/python -m bench.profile_herd [--size 300000] [--seconds 8] [--out herd.txt]`.

On a local broker this script starts and stops itself, N schedules `* * * * *` are published,
one ticker takes them in, and at the first minute boundary it meets idle (as `bench_herd`)
`py-spy record --format raw` samples it for `--seconds`. The raw stacks are kept in `--out`; the
table printed is each function's share of the samples taken inside the ticker's loop, inclusive
(the function or anything it called) and self (the function itself). py-spy pauses the process to
sample it, so a profiled herd is slower than `bench_herd`'s: compare shares, not seconds.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument("--seconds", type=int, default=8, help="how long py-spy samples")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--out", type=Path, default=Path("herd-profile.txt"))
    args = parser.parse_args()
    py_spy = Path(sys.executable).with_name("py-spy")
    with (
        tempfile.TemporaryDirectory(prefix="kairos-profile-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        settings = deployment(broker.bootstrap_servers, "profile.")
        publish(
            settings, (Schedule(id=f"herd-{n:07d}", cron="* * * * *") for n in range(args.size))
        )
        log = Path(tmp) / "ticker.log"
        ticker = start_ticker(settings, "profile", Path(tmp) / "state", log, log_level="DEBUG")
        try:
            wait_until_held([ticker], args.size)
            herd_at = quiet_minute(log, minute_after(datetime.now(UTC) + timedelta(seconds=3)))
            sleep_until(herd_at - timedelta(seconds=0.1))
            print(f"herd of {args.size:,} at {herd_at:%H:%M:%S}Z; sampling {args.seconds}s")
            subprocess.run(
                [
                    str(py_spy),
                    "record",
                    "--pid",
                    str(ticker.process.pid),
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(args.seconds),
                    "--format",
                    "raw",
                    "-o",
                    str(args.out),
                ],
                check=True,
                capture_output=True,
            )
        finally:
            ticker.stop()
    total, inclusive, own = shares(args.out.read_text())
    print(f"{total} samples inside {_LOOP}; raw stacks in {args.out}")
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"--- {title}")
        for name, samples in counts.most_common(args.top):
            print(f"{samples / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
