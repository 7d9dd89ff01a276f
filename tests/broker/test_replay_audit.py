"""`kairos audit verify`, `replay` and `runs` against a real broker.

The first tests write the records a ticker and an executor would (so every case is exact and
quick); the last ones run real tickers, kill them and stop them, and let the audit judge.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.topic_scan import ReadProgress
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import definition_record, run_requested_record
from tests.helpers import eventually, sleep_until, unique_name
from tests.processes import start_executor, start_ticker

CODECS = make_codecs()
SECOND = timedelta(seconds=1)


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


class Topics:
    """Writes the records the services would, with instants chosen by the test."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.layout = settings.layout
        self.producer = Producer(settings.client_config(acks="all"))

    def schedule(self, schedule: Schedule, changed_at: datetime, changed_by: str) -> None:
        event = {
            "schedule_id": schedule.id,
            "event_id": uuid.uuid4(),
            "change": "upserted",
            "definition": definition_record(schedule),
            "revision": 1,
            "changed_by": changed_by,
            "changed_at": changed_at,
            "reason": "backfilled by the test",
        }
        self._send(TopicRole.SCHEDULES, schedule.id, CODECS.schedule_event.encode(event))

    def fire(self, schedule: Schedule, nominal: datetime, lateness_ms: int = 40) -> None:
        decision = Decision(
            run_id(schedule.id, nominal), schedule.id, nominal, nominal, Action.FIRE
        )
        record = run_requested_record(
            decision,
            ScheduleState(schedule, version=0, next_nominal=None),
            fired_at=nominal + timedelta(milliseconds=lateness_ms),
            partition=0,
            ticker_instance="ticker-a",
        )
        self._send(TopicRole.RUNS, decision.run_id, CODECS.run_requested.encode(record))

    def event(
        self,
        schedule: Schedule,
        nominal: datetime,
        kind: str,
        by: str = "exec-1",
        reason: str | None = None,
    ) -> None:
        record = {
            "run_id": run_id(schedule.id, nominal),
            "schedule_id": schedule.id,
            "kind": kind,
            "attempt": 0 if kind == "skipped" else 1,
            "executor_instance": by,
            "nominal_at": nominal,
            "fired_at": nominal,
            "started_at": None if kind == "skipped" else nominal + SECOND,
            "finished_at": None if kind in ("started", "skipped") else nominal + 2 * SECOND,
            "reason": reason,
            "next_attempt_at": None,
        }
        self._send(
            TopicRole.RUN_EVENTS, run_id(schedule.id, nominal), CODECS.run_event.encode(record)
        )

    def _send(self, role: TopicRole, key: str, value: bytes) -> None:
        self.producer.produce(self.layout.name(role), key=key, value=value)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


@pytest.fixture
def recorded(kafka_settings: KafkaSettings) -> tuple[KafkaSettings, datetime, Schedule, Schedule]:
    """Two schedules every 2 s from T-20s, created at T-30s; the sweep's fires have faults."""
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - 20 * SECOND
    sweep = Schedule(id="billing.sweep", every=2 * SECOND, start_at=start, owner="billing")
    steady = Schedule(id="ops.steady", every=2 * SECOND, start_at=start, owner="ops")
    topics = Topics(kafka_settings)
    topics.schedule(sweep, now - 30 * SECOND, "mallory")
    topics.schedule(steady, now - 30 * SECOND, "oscar")
    for n in range(8):  # T-20s .. T-6s
        nominal = start + 2 * n * SECOND
        topics.fire(steady, nominal)
        if n == 3:
            topics.event(
                sweep,
                nominal,
                "skipped",
                by="ticker-a",
                reason="missed by more than catchup_window 1s",
            )
        elif n != 5:  # T-10s is lost
            topics.fire(sweep, nominal, lateness_ms=10 * (n + 1))
    topics.fire(sweep, start + 2 * SECOND)  # committed twice
    topics.fire(Schedule(id="ghost", every=2 * SECOND, start_at=start), start)  # nothing owed it
    topics.event(sweep, start, "started")
    topics.event(sweep, start, "succeeded")
    topics.event(sweep, start + 4 * SECOND, "failed", reason="exit status 3")
    topics.flush()
    return kafka_settings, now, sweep, steady


def window(now: datetime) -> list[str]:
    return [
        "--from",
        f"{now - 20 * SECOND:%Y-%m-%dT%H:%M:%SZ}",
        "--to",
        f"{now - 4 * SECOND:%Y-%m-%dT%H:%M:%SZ}",
    ]


def test_audit_verify_reports_lost_skipped_duplicate_and_unexpected_runs(
    recorded: tuple[KafkaSettings, datetime, Schedule, Schedule],
) -> None:
    settings, now, sweep, steady = recorded
    result = kairos(settings, "audit", "verify", *window(now), "--json")
    assert result.exit_code == 1, result.output
    report = as_json(result)
    totals = {
        k: report[k]
        for k in ("expected", "fired", "skipped", "lost", "duplicates", "unexpected", "pending")
    }
    assert totals == {
        "expected": 16,
        "fired": 14,
        "skipped": 1,
        "lost": 1,
        "duplicates": 1,
        "unexpected": 1,
        "pending": 0,
    }
    assert report["ok"] is False
    by_id = {s["schedule_id"]: s for s in report["schedules"]}
    assert set(by_id) == {"billing.sweep", "ops.steady", "ghost"}
    detail = by_id["billing.sweep"]
    assert [r["run_id"] for r in detail["lost_runs"]] == [run_id(sweep.id, now - 10 * SECOND)]
    assert detail["duplicate_runs"] == {run_id(sweep.id, now - 18 * SECOND): 1}
    assert detail["skipped_runs"] == [
        {
            "run_id": run_id(sweep.id, now - 14 * SECOND),
            "reason": "missed by more than catchup_window 1s",
        }
    ]
    assert detail["outcomes"] == {"failed": 1, "succeeded": 1, "unreported": 4}
    assert detail["lateness_ms"] == {
        "count": 6,
        "p50": 30,
        "p90": 80,
        "p99": 80,
        "max": 80,
        "min": 10,
    }
    assert by_id["ghost"]["unexpected_runs"] == [run_id("ghost", now - 20 * SECOND)]
    assert by_id["ops.steady"]["fired"] == by_id["ops.steady"]["expected"] == 8

    human = kairos(settings, "audit", "verify", *window(now))
    assert human.exit_code == 1
    assert f"LOST {run_id(sweep.id, now - 10 * SECOND)}" in human.stdout
    assert "FAILED" in human.stdout

    one = kairos(settings, "audit", "verify", *window(now), "--schedule", steady.id, "--json")
    assert one.exit_code == 0, one.output
    assert (as_json(one)["expected"], as_json(one)["lost"], as_json(one)["ok"]) == (8, 0, True)


def test_the_history_reader_reports_its_progress_to_the_end(
    recorded: tuple[KafkaSettings, datetime, Schedule, Schedule],
) -> None:
    settings = recorded[0]
    steps: list[ReadProgress] = []
    runs = HistoryReader(settings, on_progress=steps.append).runs()
    assert len(runs) == 16  # 8 steady, 6 + 1 duplicate of the sweep, 1 ghost
    assert {step.topic for step in steps} == {settings.layout.name(TopicRole.RUNS)}
    assert steps[-1].done == steps[-1].total == 16
    assert [step.done for step in steps] == sorted(step.done for step in steps)


def test_audit_verify_explains_unusable_arguments(kafka_settings: KafkaSettings) -> None:
    naive = kairos(
        kafka_settings, "audit", "verify", "--from", "2027-03-14T07:00:00", "--to", "now"
    )
    assert naive.exit_code == 2
    assert "--from" in naive.stderr and "offset" in naive.stderr
    backwards = kairos(kafka_settings, "audit", "verify", "--from", "-1m", "--to", "-2m")
    assert backwards.exit_code == 2
    assert "swap them" in backwards.stderr
    missing = CliRunner().invoke(
        app,
        [
            "--bootstrap-servers",
            kafka_settings.bootstrap_servers,
            "--topic-prefix",
            unique_name("nowhere") + ".",
            "audit",
            "verify",
            "--from",
            "-1m",
            "--to",
            "now",
        ],
    )
    assert missing.exit_code == 2
    assert "kairos topics create" in missing.stderr


def test_runs_get_tells_one_runs_story_and_runs_list_the_schedules_runs(
    recorded: tuple[KafkaSettings, datetime, Schedule, Schedule],
) -> None:
    settings, now, sweep, _ = recorded
    twice = run_id(sweep.id, now - 18 * SECOND)
    story = as_json(kairos(settings, "runs", "get", twice, "--json"))
    assert story["duplicate_commits"] == 1
    assert story["status"] == "requested"
    assert story["version"]["changed_by"] == "mallory"
    assert [r["ticker_instance"] for r in story["requests"]] == ["ticker-a", "ticker-a"]

    first = run_id(sweep.id, now - 20 * SECOND)
    told = kairos(settings, "runs", "get", first)
    assert told.exit_code == 0, told.output
    assert f"{first}: succeeded" in told.stdout
    assert "started" in told.stdout and "mallory" in told.stdout

    never = kairos(settings, "runs", "get", run_id(sweep.id, now - 10 * SECOND))
    assert never.exit_code == 2
    assert "audit verify --schedule billing.sweep" in never.stderr
    garbled = kairos(settings, "runs", "get", "not-a-run-id")
    assert garbled.exit_code == 2 and "run ids look like" in garbled.stderr

    listed = as_json(kairos(settings, "runs", "list", "--schedule", sweep.id, "--json"))
    statuses = {entry["run_id"]: entry["status"] for entry in listed}
    assert len(statuses) == 7  # 6 fired, 1 skipped; the lost one never appears
    assert statuses[first] == "succeeded"
    assert statuses[run_id(sweep.id, now - 16 * SECOND)] == "failed"
    assert statuses[run_id(sweep.id, now - 14 * SECOND)] == "skipped"
    latest = as_json(
        kairos(settings, "runs", "list", "--schedule", sweep.id, "--limit", "2", "--json")
    )
    assert [e["nominal_at"] for e in latest] == [
        f"{now - 8 * SECOND:%Y-%m-%dT%H:%M:%SZ}",
        f"{now - 6 * SECOND:%Y-%m-%dT%H:%M:%SZ}",
    ]


def test_replay_shows_changes_runs_outcomes_and_skips_in_time_order(
    recorded: tuple[KafkaSettings, datetime, Schedule, Schedule],
) -> None:
    settings, _, sweep, _ = recorded
    result = kairos(settings, "replay", "--schedule", sweep.id, "--json")
    assert result.exit_code == 0, result.output
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    assert entries[0]["type"] == "change"
    assert (entries[0]["change"], entries[0]["changed_by"]) == ("created", "mallory")
    assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)
    runs = [e for e in entries if e["type"] == "run"]
    assert [r["duplicate"] for r in runs].count(True) == 1
    assert runs[0]["outcome"] == "succeeded"
    assert [e["kind"] for e in runs[0]["events"]] == ["started", "succeeded"]
    assert [e["type"] for e in entries].count("skip") == 1
    by_owner = kairos(settings, "replay", "--owner", "ops", "--json")
    assert {json.loads(line)["schedule_id"] for line in by_owner.stdout.splitlines()} == {
        "ops.steady"
    }
    recent = kairos(settings, "replay", "--since", "-12s", "--json")
    assert all(json.loads(line)["type"] != "change" for line in recent.stdout.splitlines())


def test_replay_shows_a_cron_change_made_with_apply_with_who_and_when(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.yaml"
    for cron, who in (("0 * * * *", "alice"), ("*/5 * * * *", "bob")):
        path.write_text(f"schedules:\n  - id: settle\n    cron: '{cron}'\n    owner: payments\n")
        applied = kairos(
            kafka_settings,
            "apply",
            "-f",
            str(path),
            "--changed-by",
            who,
            "--reason",
            f"{who} says so",
        )
        assert applied.exit_code == 0, applied.output
    lines = kairos(kafka_settings, "replay", "--schedule", "settle", "--json").stdout
    created, changed = (json.loads(line) for line in lines.splitlines())
    assert (created["change"], created["changed_by"]) == ("created", "alice")
    assert changed["change"] == "upserted"
    assert changed["changed_by"] == "bob"
    assert changed["reason"] == "bob says so"
    assert changed["changes"] == {"cron": {"before": "0 * * * *", "after": "*/5 * * * *"}}
    assert created["at"] < changed["at"]
    human = kairos(kafka_settings, "replay", "--schedule", "settle")
    assert 'upserted by bob, revision 1: cron: "0 * * * *" → "*/5 * * * *"' in human.stdout
    assert changed["at"] in human.stdout
    assert 'created by alice, revision 0: cron "0 * * * *", owner "payments"' in human.stdout


# -- real tickers ------------------------------------------------------------------------------


def instant(value: datetime) -> str:
    return f"{value:%Y-%m-%dT%H:%M:%SZ}"


def passing_audit(settings: KafkaSettings, start: datetime, end: datetime) -> Result:
    """The audit of the window, once it passes (exit 0); fails the probe until then."""
    result = audit(settings, start, end, "--grace", "1s")
    assert result.exit_code == 0, result.stdout[-2000:] or result.stderr
    return result


def audit(settings: KafkaSettings, start: datetime, end: datetime, *extra: str) -> Result:
    return kairos(
        settings,
        "audit",
        "verify",
        "--from",
        instant(start),
        "--to",
        instant(end),
        "--json",
        *extra,
    )


def nominals(start: datetime, end: datetime, period: timedelta) -> int:
    return -(-(end - start) // period)  # every `period` from `start`, before `end`


def test_two_tickers_and_a_sigkill_lose_nothing_and_fire_nothing_twice(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = unique_name("tickers")
    monkeypatch.setenv("KAIROS_TICKER_GROUP", group)
    start = datetime.now(UTC).replace(microsecond=0) + 8 * SECOND
    count = 300
    with SchedulesClient(kafka_settings, changed_by="audit-test") as client:
        client.upsert_all(
            [Schedule(id=f"job-{n:03d}", every=2 * SECOND, start_at=start) for n in range(count)]
        )
    killed = start_ticker(kafka_settings, "a", tmp_path / "a", tmp_path)
    survivor = start_ticker(kafka_settings, "b", tmp_path / "b", tmp_path)
    executor = start_executor(kafka_settings, "e", tmp_path / "e", tmp_path)
    try:
        killed.wait_for_log("handover event=assigned")
        survivor.wait_for_log("handover event=assigned")
        sleep_until(start + 10 * SECOND)
        before = owners(kafka_settings, group)
        assert before == {"a", "b"}, before
        killed.kill()
        end = datetime.now(UTC).replace(microsecond=0) + 10 * SECOND
        sleep_until(end + SECOND)
        result = eventually(
            lambda: passing_audit(kafka_settings, start, end),
            timeout_s=60,
            interval_s=2,
            message="the audit still finds occurrences lost after the failover",
        )
        # The handover is visible to operators: the survivor owns every partition.
        assert eventually(lambda: owners(kafka_settings, group) == {"b"}, timeout_s=30)
        # No more fires, so the executor can drain what was fired.
        assert survivor.stop() == 0, survivor.log()[-3000:]
        # Every fired run was executed once (noop jobs): the outcomes come from run events.
        executed = eventually(
            lambda: succeeded(passing_audit(kafka_settings, start, end)),
            timeout_s=120,
            interval_s=2,
            message="the executor did not report every run succeeded",
        )
    finally:
        survivor.stop()
        assert executor.stop() == 0, executor.log()[-3000:]
    report = as_json(result)
    expected = count * nominals(start, end, 2 * SECOND)
    assert (report["expected"], report["fired"]) == (expected, expected)
    assert (report["lost"], report["duplicates"], report["unexpected"]) == (0, 0, 0)
    assert executed == expected
    # The killed ticker's occurrences waited for the failover (the 3 s session timeout, counted
    # from its last heartbeat, then the restore): late, not lost.
    assert report["lateness_ms"]["max"] >= 300, report["lateness_ms"]


def owners(settings: KafkaSettings, group: str) -> set[str]:
    result = kairos(settings, "partitions", "--group-id", group, "--json")
    return {p["owner"] for p in as_json(result)["partitions"] if p["owner"]}


def succeeded(result: Result) -> int:
    report = as_json(result)
    done = int(report["outcomes"].get("succeeded", 0))
    assert done == report["fired"], report["outcomes"]
    return done


def test_occurrences_missed_while_every_ticker_is_down_are_lost_until_a_restart_fires_them(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_TICKER_GROUP", unique_name("tickers"))
    start = datetime.now(UTC).replace(microsecond=0) + 6 * SECOND
    every = [Schedule(id=f"all-{n:02d}", every=2 * SECOND, start_at=start) for n in range(40)]
    # Found more than 3 s late after the restart: skipped by policy, recorded, not lost.
    bounded = [
        Schedule(id=f"bounded-{n:02d}", every=2 * SECOND, start_at=start, catchup_window=3 * SECOND)
        for n in range(10)
    ]
    with SchedulesClient(kafka_settings, changed_by="audit-test") as client:
        client.upsert_all(every + bounded)
    ticker = start_ticker(kafka_settings, "solo", tmp_path / "solo", tmp_path)
    ticker.wait_for_log("handover event=assigned")
    sleep_until(start + 4 * SECOND)
    assert ticker.stop() == 0
    down_from = datetime.now(UTC)
    end = down_from.replace(microsecond=0) + 6 * SECOND
    sleep_until(end + 2 * SECOND)

    down = audit(kafka_settings, start, end, "--grace", "1s")
    assert down.exit_code == 1, down.output
    report = as_json(down)
    assert report["lost"] >= 50 * 2, report["lost"]
    lost = [r for s in report["schedules"] for r in s["lost_runs"]]
    assert all(r["due_at"] >= instant(down_from - 2 * SECOND) for r in lost), lost[:3]

    (tmp_path / "restart").mkdir()
    restarted = start_ticker(kafka_settings, "solo", tmp_path / "solo", tmp_path / "restart")
    try:
        restarted.wait_for_log("handover event=assigned")
        result = eventually(
            lambda: passing_audit(kafka_settings, start, end),
            timeout_s=60,
            interval_s=2,
            message="the missed occurrences did not fire after the restart",
        )
    finally:
        assert restarted.stop() == 0
    report = as_json(result)
    assert (report["lost"], report["duplicates"]) == (0, 0)
    assert report["expected"] == 50 * nominals(start, end, 2 * SECOND)
    by_id = {s["schedule_id"]: s for s in report["schedules"]}
    # misfire `all` (the default): fired late, with their lateness measured.
    assert all(by_id[s.id]["fired"] == by_id[s.id]["expected"] for s in every)
    assert min(by_id[s.id]["lateness_ms"]["max"] for s in every) >= 2000
    # catchup_window: the long-missed ones were skipped by policy, each with its reason.
    skipped = [r for s in bounded for r in by_id[s.id]["skipped_runs"]]
    assert skipped and all("catchup_window" in r["reason"] for r in skipped)
    late_ones = {r["run_id"] for r in lost}
    assert {r["run_id"] for r in skipped} <= late_ones
