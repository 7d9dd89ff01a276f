"""Operator reads against a long history: do they cost the window, or the history?

Run: `.venv/bin/python -m bench.bench_history_reads [--history-runs 1000000]
[--window-runs 180000] [--schedules 3000] [--gap-s SECONDS] [--profile] [--json out.json]`.

On a local broker this script starts and stops itself, two deployments side by side:

1. Both: `--schedules` schedules every second (`s-00000` ...), published with the real client.
2. "history": `--history-runs` RunRequested records, each with a `succeeded` run event, written
   straight to its runs and run-events topics, with nominal instants spread over two days long
   past: the old history. Append times cannot be backdated (the broker stamps them), so the
   script then waits `--gap-s` (default: the audit's read margin, 5 minutes, and 5 s): a
   windowed read starts that margin before its window, and history appended inside it is read,
   as it must be. With `--gap-s 2` the history lies inside the margin and every read sees it.
3. Both, the same "window": `--window-runs` runs and events, one per schedule per second from a
   whole second W0 to W1, each written once its second has passed (never ahead of the clock),
   so every occurrence the schedules owe in [W0, W1) fired: the audit must hold.
4. Timed with `time.perf_counter()`, in each deployment (the history one first, so it pays any
   cold start): `audit_window` of [W0, W1) as `kairos audit verify` runs it (reading from the
   margin before W0), `kairos schedules describe s-00000 --json` and `kairos runs late --since W0
   --json` through the CLI in-process; in the history deployment also the audit with
   `whole_history=True`, the before-figure of reading everything.
5. `kairos schedules describe --view` on a console view of the window-only deployment, filled
   by the console's own follower first (an index: its cost does not grow with the topics).

Printed: each topic's records (and how many a windowed read starts at), the audit verdicts and
counts, and per command the seconds with history, window only, and their ratio. The script fails
if an audit does not hold or does not count every window run expected and fired.

Scale: before e2e3b8d the audit's verdict (`kairos.core.audit_verdict`) scanned the window's
fires once per schedule, schedules x window runs whatever the history (31 of 35 s at 500 x
30,000); it now groups them once. docs/benchmarks.md, "Issue #43", has both runs.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from typer.testing import CliRunner

from bench.common import PARTITIONS, deployment, local_broker, publish, sleep_until
from bench.outcome import Outcome, write_outcomes
from kairos.cli.app import app
from kairos.cli.audit import audit_window
from kairos.cli.reading import text
from kairos.cli.view_index import records_behind
from kairos.core.audit_margin import read_margin
from kairos.core.audit_report import Verdict
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.core.schedule_lifecycle import Deadline
from kairos.services.console.follower import ViewFollower
from kairos.services.console.view import ConsoleView
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.run_encoder import RunRequestedEncoder

SECOND = timedelta(seconds=1)
HISTORY_SPAN = timedelta(days=2)
"""The history's nominal instants are spread over this, ending a day before the window."""
DESCRIBE_LOOKBACK = timedelta(minutes=1)
"""`recent_runs`'s first step for a schedule every second (its shortest), before the margin."""
_CHUNK = 20_000
"""Records encoded at a time, then handed to the producer."""


class Writer:
    """Writes what a ticker and an executor would for each run: its RunRequested, pre-encoded
    with the herd encoder (byte-identical to the codec's), and its `succeeded` run event."""

    def __init__(self, bootstrap_settings: KafkaSettings, schedules: Sequence[Schedule]) -> None:
        self._producer = Producer(
            bootstrap_settings.client_config(
                **{
                    "acks": "1",
                    "linger.ms": 50,
                    "batch.size": 1_000_000,
                    "compression.type": "lz4",
                    "queue.buffering.max.messages": 1_000_000,
                    "queue.buffering.max.kbytes": 1_048_576,
                }
            )
        )
        codecs = make_codecs()
        self._event_codec = codecs.run_event
        self._encoder = RunRequestedEncoder(codecs.run_requested, "bench-ticker")
        self.states = [ScheduleState(s, version=0, next_nominal=None) for s in schedules]
        self._partitions = [partition_for(s.id, PARTITIONS) for s in schedules]

    def encode(self, index: int, nominal: datetime) -> tuple[str, bytes, bytes]:
        """The run id, RunRequested and `succeeded` event of schedule `index` at `nominal`."""
        state = self.states[index]
        schedule_id = state.schedule_id
        rid = run_id(schedule_id, nominal)
        decision = Decision(rid, schedule_id, nominal, nominal, Action.FIRE)
        fired_at = nominal + timedelta(milliseconds=40)
        run = self._encoder.encode(
            decision, state, fired_at=fired_at, partition=self._partitions[index]
        )
        event = {
            "run_id": rid,
            "schedule_id": schedule_id,
            "kind": "succeeded",
            "attempt": 1,
            "executor_instance": "bench-executor",
            "nominal_at": nominal,
            "fired_at": fired_at,
            "started_at": nominal + timedelta(milliseconds=50),
            "finished_at": nominal + timedelta(milliseconds=100),
            "reason": None,
            "next_attempt_at": None,
        }
        return rid, run, self._event_codec.encode(event)

    def send(self, settings: KafkaSettings, encoded: Sequence[tuple[str, bytes, bytes]]) -> None:
        runs = settings.layout.name(TopicRole.RUNS)
        events = settings.layout.name(TopicRole.RUN_EVENTS)
        for rid, run, event in encoded:
            self._produce(runs, rid, run)
            self._produce(events, rid, event)
        self._producer.poll(0)

    def _produce(self, topic: str, key: str, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, key=key, value=value)
                return
            except BufferError:
                self._producer.poll(0.05)

    def flush(self) -> None:
        if self._producer.flush(120) != 0:
            raise RuntimeError("the producer did not deliver every record within 120 s")


def bench_schedules(count: int, anchor: datetime) -> list[Schedule]:
    """Every second from `anchor`; a deadline so that `runs late` judges every run."""
    deadline = Deadline(finish_by=timedelta(seconds=5))
    return [
        Schedule(id=f"s-{n:05d}", every=SECOND, start_at=anchor, deadline=deadline)
        for n in range(count)
    ]


def write_history(writer: Writer, settings: KafkaSettings, count: int, anchor: datetime) -> float:
    """`count` runs, in nominal order, over `HISTORY_SPAN` from `anchor`; the seconds taken."""
    size = len(writer.states)
    step = max(SECOND, HISTORY_SPAN / max(1, math.ceil(count / size)) // SECOND * SECOND)
    started = time.perf_counter()
    for first in range(0, count, _CHUNK):
        chunk = range(first, min(count, first + _CHUNK))
        writer.send(settings, [writer.encode(j % size, anchor + (j // size) * step) for j in chunk])
    writer.flush()
    return time.perf_counter() - started


def write_window(
    writer: Writer, deployments: Sequence[KafkaSettings], start: datetime, seconds: int
) -> float:
    """One run per schedule per second of [start, start + seconds), to every deployment, each
    second's once it has passed; the seconds taken after `start`."""
    for k in range(seconds):
        nominal = start + k * SECOND
        sleep_until(nominal + SECOND)  # its fired, started and finished instants are past too
        encoded = [writer.encode(index, nominal) for index in range(len(writer.states))]
        for settings in deployments:
            writer.send(settings, encoded)
    writer.flush()
    return (datetime.now(UTC) - start).total_seconds()


def topic_records(settings: KafkaSettings, since: datetime) -> dict[str, dict[str, int]]:
    """Per topic: its records, and those appended at or after `since` (where a windowed read
    of the runs and run-events topics starts; the schedules topic is always read whole)."""
    consumer = Consumer(
        settings.consumer_config(**{"group.id": settings.deployment_id("bench-counter")})
    )
    at_ms = int(since.timestamp() * 1000)
    counts: dict[str, dict[str, int]] = {}
    try:
        for role in (TopicRole.SCHEDULES, TopicRole.RUNS, TopicRole.RUN_EVENTS):
            topic = settings.layout.name(role)
            partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
            asked = [TopicPartition(topic, p, at_ms) for p in partitions]
            total = read = 0
            for answer in consumer.offsets_for_times(asked, timeout=30):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, answer.partition), timeout=30
                )
                total += high - low
                read += high - max(low, answer.offset if answer.offset >= 0 else high)
            counts[role.value] = {"records": total, "from_margin": read}
    finally:
        consumer.close()
    return counts


@dataclass
class Measured:
    seconds: float
    detail: str
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def measure_audit(
    settings: KafkaSettings, start: datetime, end: datetime, owed: int, whole: bool
) -> Measured:
    began = time.perf_counter()
    report, warnings = audit_window(
        settings, start, end, as_of=datetime.now(UTC), whole_history=whole
    )
    seconds = time.perf_counter() - began
    expected, fired = report.total("expected"), report.total("fired")
    problems = [f"warning: {w}" for w in warnings]
    if report.verdict is not Verdict.HOLDS or not expected == fired == owed:
        kinds = sorted({f.kind.value for f in report.findings})
        problems.append(
            f"audit {report.verdict.value}: expected {expected:,}, fired {fired:,} of "
            f"{owed:,} owed; findings {kinds}"
        )
    detail = f"{report.verdict.value.upper()} expected {expected:,} fired {fired:,}"
    return Measured(seconds, detail, problems, {"expected": expected, "fired": fired})


def cli(settings: KafkaSettings, *args: str) -> Any:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    prefix = ["--topic-prefix", settings.topic_prefix]
    result = CliRunner().invoke(app, [*connection, *prefix, *args])
    if result.exit_code != 0:
        raise RuntimeError(f"kairos {' '.join(args)} exited {result.exit_code}: {result.output}")
    return json.loads(result.stdout)


def measure_describe(settings: KafkaSettings, schedule_id: str) -> Measured:
    began = time.perf_counter()
    document = cli(settings, "schedules", "describe", schedule_id, "--json")
    seconds = time.perf_counter() - began
    runs = document["last_runs"]
    problems = [] if len(runs) == 5 else [f"describe showed {len(runs)} last runs, not 5"]
    last = runs[-1]["run_id"] if runs else "none"
    return Measured(seconds, f"{len(runs)} last runs, latest {last}", problems)


def measure_late(settings: KafkaSettings, start: datetime) -> Measured:
    began = time.perf_counter()
    rows = cli(settings, "runs", "late", "--since", str(text(start)), "--json")
    seconds = time.perf_counter() - began
    problems = [f"runs late listed {len(rows)} late runs, not 0"] if rows else []
    return Measured(seconds, f"{len(rows)} late runs", problems)


def measure_view_describe(settings: KafkaSettings, workdir: Path) -> dict[str, float]:
    """`describe --view` on a console view the console's own follower filled from `settings`:
    the seconds the fill took (not a read an operator waits for) and the describe's."""
    url = f"sqlite:///{workdir / 'view.sqlite'}"
    view = ConsoleView(url)
    follower = ViewFollower(settings, view)
    began = time.perf_counter()
    follower.start()
    try:
        while records_behind(view, settings) > 2 * PARTITIONS:  # transaction markers aside
            time.sleep(1)
    finally:
        follower.stop()
    filled = time.perf_counter() - began
    began = time.perf_counter()
    document = cli(settings, "schedules", "describe", "s-00000", "--view", url, "--json")
    seconds = time.perf_counter() - began
    if len(document["last_runs"]) != 5:
        raise RuntimeError(f"describe --view showed {len(document['last_runs'])} runs, not 5")
    print(f"  schedules describe --view: {seconds:.2f}s (the follower filled it in {filled:.0f}s)")
    return {"describe_view_s": seconds, "view_fill_s": filled}


def profile(call: Callable[[], object], title: str) -> None:
    """Run `call` under cProfile and print its top 15 entries by cumulative time."""
    profiler = cProfile.Profile()
    profiler.runcall(call)
    print(f"\n--- profile: {title} (top 15 cumulative) ---")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)


@dataclass
class Row:
    command: str
    history: Measured
    window_only: Measured | None
    versus: str = ""
    """What the ratio divides by, when not this command's window-only figure."""

    def ratio(self, fallback: Measured | None = None) -> float | None:
        base = self.window_only or fallback
        return None if base is None else self.history.seconds / base.seconds


def measure_all(
    history: KafkaSettings, window_only: KafkaSettings, start: datetime, end: datetime, owed: int
) -> list[Row]:
    """Each command in the history deployment, then in the window-only one."""
    commands: list[tuple[str, Callable[[KafkaSettings], Measured]]] = [
        ("audit verify (window)", lambda s: measure_audit(s, start, end, owed, whole=False)),
        ("schedules describe", lambda s: measure_describe(s, "s-00000")),
        ("runs late --since W0", lambda s: measure_late(s, start)),
    ]
    rows = []
    for name, run in commands:
        first = run(history)
        second = run(window_only)
        rows.append(Row(name, first, second))
        print(f"  {name}: {first.seconds:.2f}s with history, {second.seconds:.2f}s window only")
    whole = measure_audit(history, start, end, owed, whole=True)
    rows.append(Row("audit --whole-history", whole, None, "audit verify (window), window only"))
    return rows


def print_rows(rows: Sequence[Row]) -> None:
    windowed_audit = rows[0].window_only
    print(f"\n{'command':<24} {'with history':>13} {'window only':>12} {'ratio':>7}")
    for row in rows:
        only = f"{row.window_only.seconds:11.2f}s" if row.window_only else f"{'-':>12}"
        ratio = row.ratio(windowed_audit)
        shown = "-" if ratio is None else f"{ratio:.2f}"
        note = f"  (÷ {row.versus})" if row.versus else ""
        print(f"{row.command:<24} {row.history.seconds:12.2f}s {only} {shown:>7}{note}")
    print()
    for row in rows:
        print(f"{row.command:<24} history: {row.history.detail}")
        if row.window_only:
            print(f"{'':<24} window only: {row.window_only.detail}")


def print_topics(label: str, counts: dict[str, dict[str, int]]) -> None:
    parts = [
        f"{topic} {c['records']:,}"
        + (f" ({c['from_margin']:,} from W0 - margin)" if topic != "schedules" else "")
        for topic, c in counts.items()
    ]
    print(f"  {label:<12} " + ", ".join(parts))


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    owed: int
    margin: timedelta
    history_written: datetime
    timings: dict[str, float]


def prepare(history: KafkaSettings, window_only: KafkaSettings, args: argparse.Namespace) -> Window:
    """Publish, write the history, wait out the gap, write the window to both deployments."""
    anchor = datetime.now(UTC).replace(microsecond=0) - HISTORY_SPAN - timedelta(days=1)
    schedules = bench_schedules(args.schedules, anchor)
    publish_s = publish(history, schedules) + publish(window_only, schedules)
    writer = Writer(history, schedules)
    history_s = write_history(writer, history, args.history_runs, anchor)
    written = datetime.now(UTC)
    print(
        f"published {len(schedules):,} schedules x2 in {publish_s:.1f}s; wrote "
        f"{args.history_runs:,} runs + events of history in {history_s:.1f}s "
        f"({2 * args.history_runs / history_s:,.0f} records/s)"
    )
    margin = read_margin(schedules)
    gap = margin + 5 * SECOND if args.gap_s is None else timedelta(seconds=args.gap_s)
    start = (written + gap).replace(microsecond=0) + SECOND
    seconds = max(1, round(args.window_runs / args.schedules))
    if gap < margin:
        print(f"gap {gap} is inside the reads' margin {margin}: windowed reads include history")
    print(
        f"window {text(start)} .. +{seconds}s ({seconds * len(schedules):,} runs), "
        f"starting in {(start - datetime.now(UTC)).total_seconds():.0f}s"
    )
    window_s = write_window(writer, [history, window_only], start, seconds)
    if gap >= margin:
        # `describe` reads back its shortest step plus the margin from now: past the history.
        sleep_until(written + DESCRIBE_LOOKBACK + margin + 2 * SECOND)
    timings = {"publish_s": publish_s, "history_write_s": history_s, "window_write_s": window_s}
    return Window(
        start, start + seconds * SECOND, seconds * len(schedules), margin, written, timings
    )


def run(bootstrap: str, args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    stamp = int(time.time())
    history = deployment(bootstrap, f"history-reads-h-{stamp}.")
    window_only = deployment(bootstrap, f"history-reads-w-{stamp}.")
    window = prepare(history, window_only, args)
    since = window.start - window.margin
    topics = {
        "history": topic_records(history, since),
        "window only": topic_records(window_only, since),
    }
    print(f"records per topic (a windowed read starts at {text(since)}):")
    for label, counts in topics.items():
        print_topics(label, counts)
    rows = measure_all(history, window_only, window.start, window.end, window.owed)
    print_rows(rows)
    problems = [p for row in rows for m in (row.history, row.window_only) if m for p in m.problems]
    if args.profile:
        start, end = window.start, window.end
        profile(
            lambda: audit_window(history, start, end, as_of=datetime.now(UTC)),
            "windowed audit, history",
        )
        profile(lambda: cli(history, "schedules", "describe", "s-00000", "--json"), "describe")
    if problems:
        raise RuntimeError("the benchmark measured the wrong thing: " + "; ".join(problems))
    with tempfile.TemporaryDirectory(prefix="kairos-view-") as workdir:
        viewed = measure_view_describe(window_only, Path(workdir))
    extra = {
        **viewed,
        "window": [text(window.start), text(window.end)],
        "history_written": text(window.history_written),
        "margin_s": window.margin.total_seconds(),
        "topics": topics,
        **window.timings,
    }
    return rows, extra


def outcomes(rows: Sequence[Row], args: argparse.Namespace, extra: dict[str, Any]) -> list[Outcome]:
    windowed_audit = rows[0].window_only
    return [
        Outcome(
            system="kairos",
            scenario="history-reads",
            n=args.schedules,
            config=row.command,
            expected=row.history.counts.get("expected", 0),
            fires=row.history.counts.get("fired", 0),
            seconds=row.history.seconds,
            extra={
                "window_only_s": row.window_only.seconds if row.window_only else None,
                "ratio": row.ratio(windowed_audit),
                "ratio_to": row.versus or "window only",
                "history_runs": args.history_runs,
                "window_runs": args.window_runs,
                **extra,
            },
        )
        for row in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-runs", type=int, default=1_000_000)
    parser.add_argument("--window-runs", type=int, default=180_000)
    parser.add_argument("--schedules", type=int, default=3000)
    parser.add_argument(
        "--gap-s",
        type=float,
        help="seconds from the history's end to the window (default: the read margin + 5 s)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile two history reads")
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    args = parser.parse_args()
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        rows, extra = run(broker.bootstrap_servers, args)
    print(f"\ntotal {time.monotonic() - began:.0f}s")
    if args.json:
        write_outcomes(args.json, outcomes(rows, args, extra))


if __name__ == "__main__":
    main()
