"""Ownership that holds with direct topic access: impersonation attempts against a real ticker.

Team `payments` owns a schedule. Team `growth`, which may publish to the schedules topic like
every team, tries to overwrite, pause, delete, tombstone and re-run it: through the CLI signed
with its own key (which refuses before publishing), and raw with its own Kafka client. Someone
without a registered key forges `payments`' name, publishes unsigned, and replays one of
`payments`' own signed records. Each raw attempt is refused by the ticker (`--ownership
signed`), dead-lettered with its reason and reported to the team that signed it; the schedule
keeps firing as `payments` defined it, and the teams' own changes, and the ticker's own
after_last_run, are taken.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kairos.core.ownership import Team
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.run_id import RERUN_MARK
from kairos.core.schedule import Schedule
from kairos.services.ticker.settings import Ownership
from kairos.streams.client.schedule_publisher import ScheduleNotFoundError, SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.team_events import publish_team_change
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.dead_letters import OWNERSHIP_REFUSED
from kairos.streams.wire.records import definition_record, schedule_event_record
from kairos.streams.wire.schedule_events import IF_VERSION_HEADER
from kairos.streams.wire.signing import Signer, new_signing_key
from tests.broker.test_ticker_failover import committed_runs
from tests.helpers import eventually, unique_name
from tests.kafka_helpers import read_topic
from tests.processes import ServiceProcess, start_ticker

CODECS = make_codecs()
MAX_AGE_S = 5.0
VICTIM = "payments-settle"


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _key_file(directory: Path, team: str) -> tuple[Path, Signer]:
    text, signer = new_signing_key(team)
    path = directory / f"{team}.key"
    path.write_text(text)
    path.chmod(0o600)
    return path, signer


def _cli(settings: KafkaSettings, key: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix"]
    command = [sys.executable, "-m", "kairos.cli", *root, settings.topic_prefix]
    return subprocess.run(
        [*command, "--signing-key", str(key), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _event(schedule: Schedule | None, schedule_id: str, change: str) -> bytes:
    return CODECS.schedule_event.encode(
        {
            "schedule_id": schedule_id,
            "event_id": uuid.uuid4(),
            "change": change,
            "definition": None if schedule is None else definition_record(schedule),
            "revision": 0,
            "changed_by": "attacker",
            "changed_at": datetime.now(UTC),
            "reason": None,
        }
    )


def _rerun_event(schedule_id: str, request_id: str) -> bytes:
    now = datetime.now(UTC)
    request = RerunRequest(
        request_id, schedule_id, RerunKind.TRIGGER, now, now, None, "attacker", now, None
    )
    record = schedule_event_record(
        schedule_id,
        "rerun_requested",
        None,
        changed_by="attacker",
        changed_at=now,
        reason=None,
        rerun=request,
    )
    return CODECS.schedule_event.encode(record)


class RawClient:
    """A team's own Kafka client, publishing raw records, signed or not as the test says."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.topic = settings.layout.name(TopicRole.SCHEDULES)
        self._partitions = settings.schedules_partitions
        self._producer = Producer(settings.client_config())

    def send(
        self,
        key: str,
        value: bytes | None,
        signer: Signer | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        on_partition_of: str | None = None,
    ) -> None:
        """Send a record (on the partition of the schedule `on_partition_of` names, for a re-run
        request, else its key's)."""
        raw_key = key.encode()
        if signer is not None:
            now_ms = int(time.time() * 1000)
            headers = [
                (name, value_)
                for name, value_ in signer.headers(self.topic, raw_key, value, now_ms)
                if isinstance(value_, bytes)
            ]
        extra = (
            {}
            if on_partition_of is None
            else {"partition": partition_for(on_partition_of, self._partitions)}
        )
        self._producer.produce(self.topic, key=raw_key, value=value, headers=headers, **extra)
        assert self._producer.flush(30) == 0


def _refusals(settings: KafkaSettings) -> list[dict[str, Any]]:
    topic = settings.layout.name(TopicRole.DEAD_LETTERS)
    return [
        letter
        for _, letter in read_topic(settings.bootstrap_servers, topic, CODECS.dead_letter.decode)
        if letter["error_class"] == OWNERSHIP_REFUSED
    ]


def _signed_records(settings: KafkaSettings, schedule_id: str) -> list[tuple[bytes, list[Any]]]:
    """(value, headers) of every record of `schedule_id` on the schedules topic, in order."""
    topic = settings.layout.name(TopicRole.SCHEDULES)
    partition = partition_for(schedule_id, settings.schedules_partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": unique_name("replayer"),
            "enable.partition.eof": True,
        }
    )
    found = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        while True:
            message = consumer.poll(10)
            assert message is not None, "the schedules partition was not read to its end"
            if message.error() is not None:
                break
            if message.key() == schedule_id.encode() and message.value() is not None:
                found.append((message.value(), message.headers() or []))
    finally:
        consumer.close()
    return found


@pytest.fixture
def deployment(kafka_settings: KafkaSettings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    keys = {team: _key_file(tmp_path, team) for team in ("payments", "growth", "stranger")}
    for team in ("payments", "growth"):
        public = keys[team][1].public_key()
        publish_team_change(kafka_settings, team, Team(team, (public,)), "test-admin")
    ticker = start_ticker(
        kafka_settings,
        "t1",
        tmp_path / "t1",
        tmp_path,
        ownership=Ownership.SIGNED,
        signature_max_age_s=MAX_AGE_S,
    )
    ticker.wait_for_log("teams read: 2")
    yield {"settings": kafka_settings, "keys": keys, "ticker": ticker}
    ticker.kill()


def _audit_window(since: datetime) -> list[str]:
    until = datetime.now(UTC) - timedelta(seconds=3)
    return [
        "--from",
        f"{since - timedelta(seconds=10):%Y-%m-%dT%H:%M:%SZ}",
        "--to",
        f"{until:%Y-%m-%dT%H:%M:%SZ}",
        "--grace",
        "2s",
    ]


def _as(settings: KafkaSettings, key: Path) -> KafkaSettings:
    return settings.model_copy(update={"signing_key": key})


def _runs_of(settings: KafkaSettings, schedule_id: str) -> list[dict[str, Any]]:
    return [run for run in committed_runs(settings) if run["schedule_id"] == schedule_id]


def _attack_raw(
    settings: KafkaSettings, victim: Schedule, growth: Signer, stranger: Signer
) -> None:
    """Ten changes of `victim` sent with the attackers' own Kafka clients, which check nothing:
    growth's pause, re-run request, delete (an event and its tombstone), overwrite as itself and
    posing as the owner, and a tombstone alone; then the forged and the replayed ones."""
    raw = RawClient(settings)
    paused = victim.model_copy(update={"paused": True})
    raw.send(VICTIM, _event(paused, VICTIM, "paused"), growth)
    asked = _rerun_event(VICTIM, "by-growth")
    raw.send(f"{VICTIM}{RERUN_MARK}by-growth", asked, growth, on_partition_of=VICTIM)
    raw.send(VICTIM, _event(None, VICTIM, "deleted"), growth)
    raw.send(VICTIM, None, growth)
    taken_over = victim.model_copy(update={"owner": "growth", "every": timedelta(hours=1)})
    raw.send(VICTIM, _event(taken_over, VICTIM, "upserted"), growth)
    posing = victim.model_copy(update={"every": timedelta(hours=1)})
    raw.send(VICTIM, _event(posing, VICTIM, "upserted"), growth)
    raw.send(VICTIM, None, growth)
    # Without payments' key: payments' name on a stranger's signature, and no signature.
    forged = stranger.headers(raw.topic, VICTIM.encode(), None, int(time.time() * 1000))
    forged_headers = [
        (name, b"payments" if name == "kairos-team" else value)
        for name, value in forged
        if isinstance(value, bytes)
    ]
    raw.send(VICTIM, None, headers=forged_headers)
    raw.send(VICTIM, _event(posing, VICTIM, "upserted"))
    # payments' own pause, captured from the topic and replayed after the age limit, without
    # the version it was made at (unsigned, so anyone may strip it): refused by its age.
    pause_value, pause_headers = _signed_records(settings, VICTIM)[1]
    time.sleep(MAX_AGE_S + 1)
    signature = [(name, value) for name, value in pause_headers if name != IF_VERSION_HEADER]
    raw.send(VICTIM, pause_value, headers=signature)


def _each_refusal_names_its_attempt(refusals: list[dict[str, Any]]) -> None:
    """growth's seven raw attempts are reported to growth, each saying what it may not do; the
    forged and the unsigned ones to no team; the replay of payments' own pause to payments."""
    # A re-run request is keyed `<schedule id>~rerun-<request id>`.
    assert all(r["key"].decode().startswith(VICTIM) for r in refusals)
    by_team = [(r["reported_to"], r["reason"]) for r in refusals]
    growth_signed = [reason for team, reason in by_team if team == "growth"]
    # The CLI's delete is two records, a `deleted` event and a tombstone: both refused.
    assert len(growth_signed) == 7
    for verb in ("pause", "re-run", "delete", "overwrite", "tombstone"):
        assert any(f"may not {verb} it" in reason for reason in growth_signed), verb
    assert all("belongs to team 'payments'" in reason for reason in growth_signed)
    unsigned_or_forged = [reason for team, reason in by_team if team is None]
    assert any("does not verify with any key of team 'payments'" in r for r in unsigned_or_forged)
    assert any(reason.startswith("unsigned") for reason in unsigned_or_forged)
    replayed = [reason for team, reason in by_team if team == "payments"]
    assert len(replayed) == 1 and "away from when the broker appended it" in replayed[0]


def test_impersonation_of_every_kind_is_refused_and_reported(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    keys = deployment["keys"]
    ticker: ServiceProcess = deployment["ticker"]
    payments_key, _ = keys["payments"]
    growth_key, growth = keys["growth"]
    _, stranger = keys["stranger"]
    victim = Schedule(id=VICTIM, every=timedelta(seconds=1), start_at=_now(), owner="payments")
    with SchedulesClient(_as(settings, payments_key), changed_by="payments-ci") as owner:
        owner.upsert(victim)
        # The owner's own pause and resume are taken; the pause is replayed later.
        owner.pause(VICTIM)
        owner.resume(VICTIM)
    eventually(lambda: len(_runs_of(settings, VICTIM)) >= 2, timeout_s=60, message="no runs")

    attacks_began = datetime.now(UTC)
    # growth, signing as itself, through the CLI: refused before anything is published, with
    # the ticker's reason (the SDK checks the rules it signs under).
    for verb in ("pause", "trigger", "delete"):
        refused = _cli(settings, growth_key, "schedules", verb, VICTIM)
        assert refused.returncode == 2, refused.stderr
        assert "belongs to team 'payments'" in refused.stderr, refused.stderr
        assert "not published" in refused.stderr
    _attack_raw(settings, victim, growth, stranger)

    def all_ten() -> list[dict[str, Any]] | None:
        found = _refusals(settings)
        return found if len(found) >= 10 else None

    refusals = eventually(all_ten, timeout_s=60, message="not every attempt was dead-lettered")
    assert len(refusals) == 10, [r["reason"] for r in refusals]
    _each_refusal_names_its_attempt(refusals)

    # The schedule is still payments', firing every second as payments defined it.
    before = len(_runs_of(settings, VICTIM))
    eventually(
        lambda: len(_runs_of(settings, VICTIM)) >= before + 3,
        timeout_s=30,
        message="the schedule stopped firing after the attempts",
    )
    assert ticker.process.poll() is None, ticker.log()[-3000:]

    listed = _cli(settings, growth_key, "teams", "rejections", "growth", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 7

    # The ticker restored the key after each refusal: its latest record, which readers and
    # compaction go by, is payments' definition again, so an owner's read-modify-write (a pause)
    # never adopts what was refused.
    with SchedulesClient(settings, "reader") as reader:
        assert reader.get(VICTIM).schedule == victim
    # And the audit, which replays the topic, takes what the ticker took: no refused change
    # is owed a run, nothing fired is unexplained.
    verified = _cli(settings, growth_key, "audit", "verify", *_audit_window(attacks_began))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_teams_own_changes_and_the_tickers_own_ending_are_taken(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    growth_key, _ = deployment["keys"]["growth"]
    once = Schedule(
        id="growth-twice", every=timedelta(seconds=1), start_at=_now(), owner="growth", max_runs=2
    )
    with SchedulesClient(_as(settings, growth_key), changed_by="growth-ci") as client:
        client.upsert(once)
    eventually(lambda: len(_runs_of(settings, "growth-twice")) == 2, timeout_s=60)
    # The ticker pauses it after its last run (after_last_run), unsigned: taken, not refused.
    with SchedulesClient(settings, "reader") as reader:
        eventually(
            lambda: reader.get("growth-twice").schedule.paused,
            timeout_s=30,
            message="the ticker did not pause the schedule after its last run",
        )
    time.sleep(2)
    assert _refusals(settings) == []
    assert len(_runs_of(settings, "growth-twice")) == 2
    # And the owner resumes what it owns.
    resumed = _cli(settings, growth_key, "schedules", "resume", "growth-twice")
    assert resumed.returncode == 0, resumed.stderr
    time.sleep(2)
    assert _refusals(settings) == []


def test_a_deleted_id_stays_its_last_owners(deployment: dict[str, Any]) -> None:
    """H2: `growth` creates `payments`' id between `payments`' delete and its re-creation. The
    ticker keeps the id's last owner with its floor: growth's creation is refused (reported to
    growth), payments' re-creation is taken."""
    settings: KafkaSettings = deployment["settings"]
    payments_key, _ = deployment["keys"]["payments"]
    growth_key, _ = deployment["keys"]["growth"]
    settle = Schedule(id="payments-nightly", cron="0 3 * * *", start_at=_now(), owner="payments")
    with SchedulesClient(_as(settings, payments_key), changed_by="payments-ci") as payments:
        payments.upsert(settle)
        payments.delete(settle.id)
        with SchedulesClient(_as(settings, growth_key), changed_by="growth-ci") as growth:
            growth.upsert(settle.model_copy(update={"owner": "growth"}))
        payments.upsert(settle)

    def reported() -> list[dict[str, Any]] | None:
        # To a team: growth's creation (or, unguarded, payments' re-creation). A restoration
        # appended after payments' re-creation, when the two are taken in separate
        # transactions, is refused too, unsigned: reported to no one.
        return [r for r in _refusals(settings) if r["reported_to"] is not None] or None

    refused = eventually(reported, timeout_s=30, message="nothing was refused")
    assert [(r["key"], r["reported_to"]) for r in refused] == [(settle.id.encode(), "growth")]
    assert "was team 'payments''s until it was deleted" in refused[0]["reason"]
    with SchedulesClient(settings, "reader") as reader:

        def latest() -> bool:
            try:
                return reader.get(settle.id).schedule == settle
            except ScheduleNotFoundError:
                return False

        eventually(latest, timeout_s=30, message="the key's latest record is not payments'")


def test_one_mode_runs_the_deployment_and_readers_show_the_verified_team(
    deployment: dict[str, Any], tmp_path: Path
) -> None:
    """H6: the signed ticker refuses a team's name it cannot verify even on a change it would
    take unsigned (a delete of an id nobody holds), so readers show the team named on a change
    it took as the team it verified, beside the self-asserted changed_by. Its committed offsets
    record the mode: `kairos partitions` shows it, and a ticker started open on the same group
    refuses the partitions and exits 2 with one line saying why."""
    settings: KafkaSettings = deployment["settings"]
    payments_key, _ = deployment["keys"]["payments"]
    _, stranger = deployment["keys"]["stranger"]
    report = Schedule(id="payments-report", cron="0 6 * * *", start_at=_now(), owner="payments")
    with SchedulesClient(_as(settings, payments_key), changed_by="alice") as payments:
        payments.upsert(report)
    raw = RawClient(settings)
    forged = stranger.headers(raw.topic, b"nobody-holds", None, int(time.time() * 1000))
    named = [(n, b"payments" if n == "kairos-team" else v) for n, v in forged if v is not None]
    raw.send("nobody-holds", None, headers=named)
    eventually(
        lambda: [r for r in _refusals(settings) if r["key"] == b"nobody-holds"],
        timeout_s=30,
        message="a name the signature does not prove was taken",
    )

    described = _cli(settings, payments_key, "schedules", "describe", report.id, "-o", "json")
    assert described.returncode == 0, described.stderr
    (created,) = json.loads(described.stdout)["last_changes"]
    assert (created["changed_by"], created["signed_by"]) == ("alice", "payments")
    listed = _cli(settings, payments_key, "partitions", "-o", "json")
    assert {p["mode"] for p in json.loads(listed.stdout)["partitions"]} == {"signed"}

    deployment["ticker"].stop()
    opened = start_ticker(settings, "t2", tmp_path / "t2", tmp_path)
    try:
        exited = opened.process.wait(timeout=60)
    finally:
        opened.kill()  # never left behind, should it take the partitions
    assert exited == 2, opened.log()[-3000:]
    refused = [line for line in opened.log().splitlines() if line.startswith("error: ")]
    assert len(refused) == 1
    assert "was last committed in ownership mode 'signed'" in refused[0]
    assert "this ticker runs --ownership open" in refused[0]
