"""Calendars under signed ownership (#37 door 1, C3; door 7, M4): a real broker, a ticker process
in `--ownership signed`.

Team `treasury` owns the calendar `us-federal`; team `payments` has two schedules naming it, one
skipping its holidays, one rolling off them. Team `growth` rewrites the calendar with today and
tomorrow as holidays, unsigned and signed with its own key, then tombstones it: the ticker counts
none of it (both schedules keep firing every second, nothing is skipped or rolled), logs each
refusal with the team that signed it, and every reader agrees: `kairos calendars show` shows
treasury's version, and `kairos audit verify`, which would see the rolling schedule's fires as
two days early had it taken growth's calendar, holds. Treasury's own change takes effect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.business_calendar import parse_calendar
from kairos.core.ownership import Team
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.team_events import publish_team_change
from kairos.streams.wire.calendar_events import encode_calendar_event
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.signing import Signer, new_signing_key
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import ServiceProcess, start_ticker

CODECS = make_codecs()
CALENDAR = "us-federal"
SKIPPING = "payments.settle"
ROLLING = "payments.rolled"
EVERY_DAY = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]


def _kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def _key(directory: Path, team: str) -> tuple[Path, Signer]:
    text, signer = new_signing_key(team)
    path = directory / f"{team}.key"
    path.write_text(text)
    path.chmod(0o600)
    return path, signer


def _holidays() -> list[dict[str, str]]:
    """Today and tomorrow (UTC, the schedules' clock): every occurrence of the test is on one."""
    today = datetime.now(UTC).date()
    return [{"date": str(today + timedelta(days=n)), "name": "Kairos Test Day"} for n in (0, 1)]


def _us_federal(holidays: list[dict[str, str]]) -> dict[str, Any]:
    # Every day a business day but the holidays: only they skip or roll an occurrence.
    return {"id": CALENDAR, "owner": "treasury", "business_days": EVERY_DAY, "holidays": holidays}


def _apply(settings: KafkaSettings, key: Path, path: Path, definition: dict[str, Any]) -> Result:
    path.write_text(yaml.safe_dump({"calendars": [definition]}))
    return _kairos(settings, "--signing-key", str(key), "calendars", "apply", "-f", str(path))


def _of(settings: KafkaSettings, role: TopicRole, decode: Any, schedule_id: str) -> list[Any]:
    topic = settings.layout.name(role)
    found = read_topic(settings.bootstrap_servers, topic, decode)
    return [value for _, value in found if value["schedule_id"] == schedule_id]


def _fired(settings: KafkaSettings, schedule_id: str) -> int:
    return len(_of(settings, TopicRole.RUNS, CODECS.run_requested.decode, schedule_id))


def _skipped(settings: KafkaSettings) -> list[str]:
    events = _of(settings, TopicRole.RUN_EVENTS, CODECS.run_event.decode, SKIPPING)
    return [event["reason"] for event in events if event["kind"] == "skipped"]


def _fire_on(settings: KafkaSettings, runs: int) -> None:
    """Both schedules fire `runs` more times."""
    before = {sid: _fired(settings, sid) for sid in (SKIPPING, ROLLING)}
    eventually(
        lambda: all(_fired(settings, sid) >= before[sid] + runs for sid in before),
        timeout_s=30,
        message="the schedules naming the calendar stopped firing",
    )


def _refusals(ticker: ServiceProcess, count: int) -> list[str]:
    """The ticker's refusal log lines, once it has logged `count` of them (it reads the calendars
    topic every second, or ten seconds after a read that failed)."""

    def logged() -> list[str]:
        return [line for line in ticker.log().splitlines() if "calendar change refused" in line]

    eventually(lambda: len(logged()) >= count, timeout_s=30, message="the ticker refused nothing")
    return logged()


def _audited(settings: KafkaSettings, since: datetime, until: datetime) -> None:
    window = ["--from", f"{since:%Y-%m-%dT%H:%M:%SZ}", "--to", f"{until:%Y-%m-%dT%H:%M:%SZ}"]
    audit = _kairos(settings, "audit", "verify", *window, "--grace", "2s")
    assert audit.exit_code == 0, audit.output[-3000:]


@pytest.fixture
def signed(kafka_settings: KafkaSettings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    keys = {team: _key(tmp_path, team) for team in ("treasury", "payments", "growth")}
    for team, (_, signer) in keys.items():
        publish_team_change(kafka_settings, team, Team(team, (signer.public_key(),)), "admin")
    created = _apply(kafka_settings, keys["treasury"][0], tmp_path / "v0.yaml", _us_federal([]))
    assert created.exit_code == 0, created.output
    start = datetime.now(UTC).replace(microsecond=0)
    common = {"every": "1s", "start_at": start, "exclude": [CALENDAR], "owner": "payments"}
    schedules = [
        Schedule.model_validate({"id": SKIPPING, **common}),
        Schedule.model_validate({"id": ROLLING, "roll": "next_business_day", **common}),
    ]
    as_payments = kafka_settings.model_copy(update={"signing_key": keys["payments"][0]})
    with SchedulesClient(as_payments, changed_by="payments-ci") as payments:
        payments.upsert_all(schedules)
    ticker = start_ticker(
        kafka_settings, "t1", tmp_path / "t1", tmp_path, ownership=Ownership.SIGNED
    )
    ticker.wait_for_log("teams read: 3")
    yield {"settings": kafka_settings, "keys": keys, "ticker": ticker, "dir": tmp_path}
    ticker.kill()


def test_another_teams_calendar_changes_count_for_nobody_the_owners_do(
    signed: dict[str, Any],
) -> None:
    settings: KafkaSettings = signed["settings"]
    ticker: ServiceProcess = signed["ticker"]
    keys, directory = signed["keys"], signed["dir"]
    growth_key, growth = keys["growth"]
    _fire_on(settings, 1)

    attacks_began = datetime.now(UTC)
    # growth's own Kafka client, unsigned, keeping treasury's name as owner and publisher;
    # then through the CLI, signed with growth's key (published; refused on reading it back).
    topic = settings.layout.name(TopicRole.CALENDARS)
    forged = parse_calendar(_us_federal(_holidays()))
    raw = Producer(settings.client_config())
    value = encode_calendar_event(
        CODECS.calendar_event,
        calendar_id=CALENDAR,
        calendar=forged,
        changed_by="treasury",
        reason=None,
    )
    raw.produce(topic, key=CALENDAR.encode(), value=value)
    assert raw.flush(30) == 0
    posing = _apply(settings, growth_key, directory / "forged.yaml", _us_federal(_holidays()))
    # A refused change alters nothing, so firing alone does not show the ticker read it.
    _refusals(ticker, 2)

    _fire_on(settings, 3)
    assert _skipped(settings) == [], "growth's holidays skipped payments' runs"
    # And a tombstone signed by growth: the calendar stays treasury's.
    now_ms = int(time.time() * 1000)
    headers = [(n, v) for n, v in growth.headers(topic, CALENDAR.encode(), None, now_ms) if v]
    raw.produce(topic, key=CALENDAR.encode(), value=None, headers=headers)
    assert raw.flush(30) == 0
    refusals = _refusals(ticker, 3)
    _fire_on(settings, 2)
    attacks_ended = datetime.now(UTC)

    assert posing.exit_code == 2, posing.output
    assert "belongs to team 'treasury'" in posing.output
    assert len(refusals) == 3, refusals
    assert "(unsigned or not verified): unsigned" in refusals[0]
    assert all("(signed by team growth)" in line for line in refusals[1:]), refusals
    assert "may not change it" in refusals[1] and "may not delete it" in refusals[2]
    shown = _kairos(settings, "calendars", "show", CALENDAR, "--json")
    assert shown.exit_code == 0, shown.output
    version = json.loads(shown.stdout)["version"]
    assert (version["version"], version["signed_by"]) == (0, "treasury")
    _audited(settings, attacks_began - timedelta(seconds=10), attacks_ended)

    # The owner's change counts: payments' runs are skipped for treasury's holidays.
    changed = _apply(settings, keys["treasury"][0], directory / "v1.yaml", _us_federal(_holidays()))
    assert changed.exit_code == 0, changed.output
    eventually(lambda: len(_skipped(settings)) >= 2, timeout_s=30, message="nothing skipped")
    assert all(f"in calendar {CALENDAR} v" in reason for reason in _skipped(settings))
