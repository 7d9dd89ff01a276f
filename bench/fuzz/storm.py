"""The event storm on a live deployment, and what the deployment made of it.

A ticker and an executor run while the storm is published; then the run waits for every valid
schedule's fire, publishes a canary schedule (the processes still serve), reads back the dead
letters, the fires and the run events, and lets every reader of the history read the topics
(in process, to match each skipped record to its offset, and as `kairos` commands).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import wait_for, wait_until_held
from bench.fuzz import services
from bench.fuzz.records import Plan, StormBuilder, must_run
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.history import HistoryReader
from kairos.streams.wire.codec import DecodeError, make_codecs

LEAD = timedelta(seconds=60)
"""From the storm's start to its first valid fire: the storm is published and read by then."""
SETTLE_TIMEOUT = timedelta(minutes=3)
"""How long after the last valid fire a run may still be missing before it counts as lost."""
READER_COMMANDS = {
    "audit verify": ["audit", "verify", "--outcomes", "--json"],
    "runs list": ["runs", "list", "--limit", "20", "--json"],
    "replay": ["replay", "--json"],
    "schedules list": ["schedules", "list", "--json"],
    "partitions": ["partitions", "--json"],
}


@dataclass
class Seen:
    """What the deployment did with the storm, keyed so that each record can be found."""

    dead_letters: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)
    """By (source topic, partition, offset)."""
    refused_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Executor dead letters of the runs topic, by key (a run id)."""
    fired: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)
    """Run ids with a `succeeded` run event."""
    skipped_by_readers: dict[tuple[str, int, int], str] = field(default_factory=dict)
    """By (topic, partition, offset): the reason the history reader gave."""


@dataclass
class StormResult:
    plan: Plan
    seen: Seen
    publish_s: float
    alive_after: dict[str, bool]
    canary: dict[str, Any]
    commands: dict[str, dict[str, Any]]
    logs: dict[str, dict[str, int]]
    exit_codes: dict[str, int]
    settle_s: float


def run_storm(settings: KafkaSettings, workdir: Path, seed: int, events: int) -> StormResult:
    workdir.mkdir(parents=True, exist_ok=True)
    ticker, ticker_process = services.ticker(settings, workdir)
    executor = services.executor(settings, workdir)
    running = [ticker, executor]
    try:
        wait_until_held([ticker_process], 0, timeout_s=180)
        services.wait_until_serving(executor)
        started = datetime.now(UTC)
        counts = {spec.name: spec.partitions for spec in settings.layout.specs()}
        partitions = {role: counts[settings.layout.name(role)] for role in TopicRole}
        builder = StormBuilder(random.Random(seed), make_codecs(), partitions, started + LEAD)
        plan = builder.build(events)
        names = {role: settings.layout.name(role) for role in TopicRole}
        publish_s = services.produce(settings, names, plan.records)
        print(f"storm: {len(plan.records)} records published in {publish_s:.1f}s", flush=True)
        settle_s = _wait_for_owed(settings, plan)
        alive = {service.name: service.alive() for service in running}
        canary = _canary(settings)
        seen = _collect(settings, plan)
        commands = {
            name: _command(settings, arguments, started)
            for name, arguments in READER_COMMANDS.items()
        }
        # Alive through the storm and still alive after every reader ran.
        alive = {s.name: alive[s.name] and s.alive() for s in running}
    finally:
        codes = {service.name: service.stop() for service in running}
    logs = {service.name: _log_figures(service.log_text()) for service in running}
    return StormResult(plan, seen, publish_s, alive, canary, commands, logs, codes, settle_s)


def _owed(plan: Plan) -> set[str]:
    return {r.owed_run for r in plan.records if r.owed_run is not None and must_run(r)}


def _wait_for_owed(settings: KafkaSettings, plan: Plan) -> float:
    """Until every valid record's run has succeeded, or `SETTLE_TIMEOUT` after the last fire.

    The seconds from the last valid fire to the last success (or to the timeout)."""
    owed = _owed(plan)
    deadline = plan.fires_until + SETTLE_TIMEOUT
    while datetime.now(UTC) < plan.fires_until:
        time.sleep(5)
    while datetime.now(UTC) < deadline:
        missing = owed - _succeeded(settings)
        print(f"storm: {len(owed) - len(missing)}/{len(owed)} owed runs succeeded", flush=True)
        if not missing:
            break
        time.sleep(10)
    return (datetime.now(UTC) - plan.fires_until).total_seconds()


def _succeeded(settings: KafkaSettings) -> set[str]:
    codec = make_codecs().run_event
    done = set()
    for raw in services.read_topic(settings, settings.layout.name(TopicRole.RUN_EVENTS)):
        if raw.value is None:
            continue
        try:
            event = codec.decode(raw.value)
        except DecodeError:
            continue
        if event["kind"] == "succeeded" and event["executor_instance"] == "fuzz-executor":
            done.add(event["run_id"])
    return done


def _canary(settings: KafkaSettings) -> dict[str, Any]:
    """A valid schedule published after the storm: it must fire and run within two minutes."""
    fire_at = (datetime.now(UTC) + timedelta(seconds=15)).replace(microsecond=0)
    schedule = Schedule(id="fuzz-canary", at=fire_at)
    with SchedulesClient(settings, changed_by="bench.fuzz") as client:
        client.upsert(schedule)
    owed = run_id(schedule.id, fire_at)
    started = time.monotonic()
    try:
        wait_for(lambda: owed in _succeeded(settings), 120, f"the canary run {owed}")
    except RuntimeError:
        return {"run_id": owed, "ran": False, "seconds": None}
    return {"run_id": owed, "ran": True, "seconds": round(time.monotonic() - started, 1)}


def _collect(settings: KafkaSettings, plan: Plan) -> Seen:
    seen = Seen(ran=_succeeded(settings))
    codecs = make_codecs()
    runs_topic = settings.layout.name(TopicRole.RUNS)
    for raw in services.read_topic(settings, settings.layout.name(TopicRole.DEAD_LETTERS)):
        try:
            letter = codecs.dead_letter.decode(raw.value or b"")
        except DecodeError:
            continue  # a record of the storm itself
        if not letter["dead_lettered_by"].startswith(("ticker:", "executor:")):
            continue
        source = (letter["source_topic"], letter["source_partition"], letter["source_offset"])
        seen.dead_letters[source] = letter
        if letter["source_topic"] == runs_topic and letter["key"] is not None:
            seen.refused_runs[letter["key"].decode(errors="replace")] = letter
    for raw in services.read_topic(settings, runs_topic):
        try:
            seen.fired.add(codecs.run_requested.decode(raw.value or b"")["run_id"])
        except DecodeError:
            continue
    _read_history(settings, seen)
    return seen


def _read_history(settings: KafkaSettings, seen: Seen) -> None:
    """Every reader of the history over every topic, as `kairos audit`/`replay`/`runs` read it."""
    reader = HistoryReader(settings, idle_timeout_s=60)
    reader.schedule_events()
    reader.runs_and_unsettled()
    reader.run_events_and_unsettled()
    reader.admission_dead_letters()
    for rejected in reader.rejected:
        seen.skipped_by_readers[(rejected.topic, rejected.partition, rejected.offset)] = (
            rejected.reason
        )


def _command(settings: KafkaSettings, arguments: list[str], since: datetime) -> dict[str, Any]:
    """A `kairos` reading command over the stormed deployment, as an operator would run it."""
    window = {
        "audit": ["--from", since.isoformat(), "--to", "now"],
        "replay": ["--since", since.isoformat()],
    }
    root = [
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
        "--schedules-partitions",
        str(settings.schedules_partitions),
        "--timeout",
        "30",
    ]
    full = [sys.executable, "-m", "kairos.cli", *root, *arguments, *window.get(arguments[0], [])]
    started = time.monotonic()
    done = subprocess.run(full, capture_output=True, text=True, timeout=600, check=False)
    stderr = done.stderr.strip().splitlines()
    return {
        "exit_code": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "traceback": services.TRACEBACK in done.stderr or services.TRACEBACK in done.stdout,
        "stderr_tail": stderr[-3:],
        "stdout_bytes": len(done.stdout),
    }


def _log_figures(text: str) -> dict[str, int]:
    return {
        "tracebacks": text.count(services.TRACEBACK),
        "dead_lettering_lines": text.count("dead-lettering"),
        "error_lines": text.count(" ERROR "),
        "critical_lines": text.count(" CRITICAL "),
    }
