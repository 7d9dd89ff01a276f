"""The console at scale: page times at 1M schedules against the same pages at 1k (same run), the
coming herd's count, and how fast the view follows the schedules topic against a plain read.

Pages: a view is filled directly (`ConsoleView.apply`, the follower's own write path) with N
schedules (one change each, two labels, 1,000 owners), a day of runs (one per schedule) and its
minutes, then served by the console's app (uvicorn, in this process) to sequential HTTP requests.
The ratio of each page's median at N to its median at the baseline size says whether it stays
flat: the queries are index walks, never scans.

Intake: N schedules are published to a local broker, then a real `kairos console` process is
started and timed until its status shows N; the baseline is `ScheduleReader.read_all` of the
same topic (read and decode only), in the same run.

    .venv/bin/python -m bench.bench_console --sizes 1000 1000000 --intake 100000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn

from bench.common import deployment, free_port, local_broker, publish, wait_for
from kairos.cli.console import console_arguments
from kairos.core.audit import FiredRun, HistoryEvent
from kairos.core.instants import epoch_ms
from kairos.core.schedule import Schedule
from kairos.services.console.app import Console, build_app
from kairos.services.console.audits import AuditJobs
from kairos.services.console.documents import LiveGroup
from kairos.services.console.follower import ViewFollower
from kairos.services.console.herd import ComingHerd, count_herd
from kairos.services.console.server import door_config
from kairos.services.console.settings import ConsoleSettings
from kairos.services.console.view import ConsoleView, ScheduleRow, ViewBatch
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.sql.dialects import SQLITE_SCHEME

NOW = datetime.now(UTC).replace(second=0, microsecond=0)
OWNERS = 1_000
BATCH = 10_000
REQUESTS = 30


def schedule_id(n: int) -> str:
    return f"team-{n % OWNERS:04d}.job-{n:07d}"


def definition(n: int) -> Schedule:
    # Sixty shapes: schedules sharing one are counted once by the herd (as in a real fleet,
    # where most jobs are "every day at HH:MM").
    return Schedule(id=schedule_id(n), cron=f"{n % 60} {n % 24} * * *", owner=f"team-{n % OWNERS}")


def rows(size: int) -> Iterator[ViewBatch]:
    for start in range(0, size, BATCH):
        batch = ViewBatch()
        for n in range(start, min(size, start + BATCH)):
            schedule = definition(n)
            batch.upsert(
                ScheduleRow(
                    schedule_id=schedule.id,
                    owner=schedule.owner,
                    paused=n % 50 == 0,
                    trigger_kind="cron",
                    trigger=schedule.cron or "",
                    timezone="UTC",
                    partition=n % 12,
                    offset=n // 12,
                    revision=0,
                    changed_at=epoch_ms(NOW),
                    changed_by="bench",
                    definition=schedule.model_dump_json(exclude_defaults=True),
                    labels={"tier": ("gold", "silver", "bronze")[n % 3], "region": f"r{n % 7}"},
                )
            )
            stored = batch.schedules[schedule.id]
            assert stored is not None
            change = HistoryEvent(
                schedule.id, n % 12, n // 12, "upserted", schedule, NOW, "bench", None, 0
            )
            batch.changes.append((change, stored.definition))
            nominal = NOW - timedelta(minutes=n % 1440)
            batch.fired.append(
                FiredRun(
                    run_id=f"{schedule.id}@{nominal:%Y-%m-%dT%H:%M:%SZ}",
                    schedule_id=schedule.id,
                    nominal=nominal,
                    due_at=nominal,
                    fired_at=nominal + timedelta(milliseconds=n % 400),
                    lateness_ms=n % 400,
                    attempt=1,
                    ticker_instance="t1",
                    schedule_offset=0,
                    partition=n % 12,
                    offset=n,
                )
            )
        yield batch


def fill(view: ConsoleView, size: int) -> float:
    started = time.monotonic()
    for batch in rows(size):
        view.apply(batch)
    return time.monotonic() - started


def pages(size: int) -> dict[str, str]:
    middle = schedule_id(size // 2)
    return {
        "schedules, first page": "/schedules",
        "schedules, page past the middle": f"/schedules?after={middle}",
        "schedules, one owner": "/schedules?owner=team-7",
        "schedules, a label": "/schedules?label=region=r3",
        "schedules, owner+label+paused": "/schedules?owner=team-0&label=tier=gold&state=paused",
        "schedules, id prefix": f"/schedules?q={middle[:-2]}",
        "a schedule": f"/schedules/{middle}",
        "activity, 24 h": "/activity?hours=24",
        "API schedules, a label": "/api/v1/schedules?label=tier=bronze",
        "API activity, 24 h": "/api/v1/activity?hours=24",
    }


def timed(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
        assert response.status == 200, url
    return (time.perf_counter() - started) * 1000


def serve(console: Console) -> tuple[str, uvicorn.Server]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(console), host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    wait_for(lambda: server.started, 30, "the console's server")
    return f"http://127.0.0.1:{port}", server


def measure_pages(settings: KafkaSettings, size: int, workdir: Path) -> dict[str, Any]:
    view = ConsoleView(f"{SQLITE_SCHEME}{workdir / f'view-{size}.sqlite'}")
    fill_s = fill(view, size)
    herd = ComingHerd(view)
    console = Console(
        view,
        ViewFollower(settings, view),  # not started: the view is filled above
        LiveGroup(settings, settings.deployment_id("tickers")),
        AuditJobs(view, lambda *_: {}),
        herd,
        door_config(ConsoleSettings(state_dir=workdir), None),
    )
    base, server = serve(console)
    medians: dict[str, float] = {}
    for name, path in pages(size).items():
        timings = [timed(base + path) for _ in range(REQUESTS)]
        medians[name] = statistics.median(timings)
        print(f"  {size:>9,} {name:<34} p50 {medians[name]:8.1f} ms  max {max(timings):8.1f} ms")
    server.should_exit = True
    herd.close()
    herd_s = count_herd(view.url, NOW).took.total_seconds()
    print(f"  {size:>9,} view filled in {fill_s:.1f} s; herd counted in {herd_s:.1f} s")
    return {"size": size, "fill_s": fill_s, "herd_s": herd_s, "pages_p50_ms": medians}


def measure_intake(settings: KafkaSettings, size: int, workdir: Path) -> dict[str, Any]:
    publish(settings, (definition(n) for n in range(size)))
    started = time.monotonic()
    assert len(ScheduleReader(settings).read_all().schedules) == size
    raw_s = time.monotonic() - started
    port = free_port()
    arguments = console_arguments(settings, workdir / "intake-console", f"127.0.0.1:{port}")
    log = (workdir / "console.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "kairos.cli", *arguments], stdout=log, stderr=log
    )
    try:

        def caught_up() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status") as answer:
                    return bool(json.load(answer)["schedules"] == size)
            except OSError:
                return False

        wait_for(caught_up, 1800, f"the console to hold {size:,} schedules")
        console_s = time.monotonic() - started
    finally:
        process.terminate()
        process.wait(60)
    print(
        f"  intake of {size:,} schedules: console {console_s:.1f} s ({size / console_s:,.0f}/s), "
        f"plain read {raw_s:.1f} s ({size / raw_s:,.0f}/s): {console_s / raw_s:.2f}x"
    )
    return {"size": size, "console_s": console_s, "plain_read_s": raw_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 1_000_000])
    parser.add_argument("--intake", type=int, default=100_000, help="0: skip the intake run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"pages": []}
    with tempfile.TemporaryDirectory() as temp, local_broker(Path(temp)) as broker:
        assert broker.bootstrap_servers is not None
        settings = deployment(broker.bootstrap_servers, "bench-console.")
        for size in args.sizes:
            results["pages"].append(measure_pages(settings, size, Path(temp)))
        baseline = results["pages"][0]["pages_p50_ms"]
        for measured in results["pages"][1:]:
            print(f"  ratios at {measured['size']:,} against {results['pages'][0]['size']:,}:")
            for name, median in measured["pages_p50_ms"].items():
                print(f"    {name:<34} {median / baseline[name]:6.2f}x")
        if args.intake:
            results["intake"] = measure_intake(settings, args.intake, Path(temp))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
