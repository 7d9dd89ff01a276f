"""Readers show what the signed ticker holds, and administrators change only that (#37, doors 2, 3).

Team `growth` publishes, with its own Kafka client, a change of team `payments`' schedule that
the ticker will refuse, while the ticker is down. Until the ticker judges it, the key's latest
record is growth's: `kairos schedules get` and `describe` still show payments' definition, and
say a change awaits the ticker. An administrator's pause, made then, does not republish growth's
definition under the administrators' signature (it waits for the ticker's verdict, then pauses
what the ticker holds). A pause made from a version the schedule has left is refused, and the
newer definition stands.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kairos.core.ownership import Team
from kairos.core.schedule import Schedule
from kairos.services.ticker.settings import Ownership
from kairos.streams.client.schedule_publisher import (
    ScheduleAwaitingTickerError,
    ScheduleChange,
    SchedulesClient,
)
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.team_events import publish_team_change
from kairos.streams.wire.dead_letters import OWNERSHIP_REFUSED, STALE_CHANGE
from tests.broker.test_console_pages import address_of, api, start_console
from tests.broker.test_team_ownership import CODECS, RawClient, _as, _cli, _event, _key_file
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import ServiceProcess, start_ticker

MAX_AGE_S = 30.0
VICTIM = "payments-ledger"


def _start(settings: KafkaSettings, name: str, tmp_path: Path) -> ServiceProcess:
    ticker = start_ticker(
        settings,
        name,
        tmp_path / name,
        tmp_path,
        ownership=Ownership.SIGNED,
        signature_max_age_s=MAX_AGE_S,
    )
    ticker.wait_for_log("teams read: 3")
    return ticker


@pytest.fixture
def deployment(kafka_settings: KafkaSettings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    keys = {team: _key_file(tmp_path, team) for team in ("payments", "growth", "platform")}
    for team, (_, signer) in keys.items():
        registered = Team(team, (signer.public_key(),), admin=team == "platform")
        publish_team_change(kafka_settings, team, registered, "test-admin")
    tickers = [_start(kafka_settings, "t1", tmp_path)]
    yield {"settings": kafka_settings, "keys": keys, "tickers": tickers}
    for ticker in tickers:
        ticker.kill()


def _letters_of(settings: KafkaSettings, error_class: str) -> list[dict[str, Any]]:
    """The dead letters of `error_class` of the victim's changes."""
    topic = settings.layout.name(TopicRole.DEAD_LETTERS)
    return [
        letter
        for _, letter in read_topic(settings.bootstrap_servers, topic, _decode_letter)
        if letter["error_class"] == error_class and letter["key"] == VICTIM.encode()
    ]


def _decode_letter(value: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = CODECS.dead_letter.decode(value)
    return decoded


def test_readers_and_an_administrators_pause_go_by_the_tickers_verdict(
    deployment: dict[str, Any], tmp_path: Path
) -> None:
    settings: KafkaSettings = deployment["settings"]
    payments_key, _ = deployment["keys"]["payments"]
    _, growth = deployment["keys"]["growth"]
    start = datetime.now(UTC).replace(microsecond=0)
    ledger = Schedule(id=VICTIM, cron="0 6 * * *", start_at=start, owner="payments")
    with SchedulesClient(_as(settings, payments_key), changed_by="alice") as payments:
        payments.upsert(ledger)
        eventually(lambda: not payments.get(VICTIM).pending, timeout_s=30)

    deployment["tickers"][0].stop()
    hijacked = ledger.model_copy(update={"labels": {"hijacked": "yes"}})
    RawClient(settings).send(VICTIM, _event(hijacked, VICTIM, "upserted"), signer=growth)

    got = _cli(settings, payments_key, "schedules", "get", VICTIM, "-o", "json")
    assert got.returncode == 0, got.stderr
    shown = json.loads(got.stdout)
    assert shown["schedule"]["labels"] == {}, "a change its ticker has not taken was shown"
    assert (shown["last_change"]["changed_by"], shown["last_change"]["signed_by"]) == (
        "alice",
        "payments",
    )
    assert shown["awaiting_ticker"] == 1
    assert "1 change of payments-ledger awaits its ticker" in got.stderr
    described = _cli(settings, payments_key, "schedules", "describe", VICTIM, "-o", "json")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["awaiting_ticker"] == 1
    _the_console_shows_what_the_ticker_holds(settings, tmp_path, deployment["tickers"])

    _an_administrators_pause_waits_for_the_verdict(deployment, ledger, tmp_path)
    _growths_apply_is_refused_before_publishing(settings, deployment["keys"]["growth"][0], tmp_path)
    replayed = _cli(settings, payments_key, "replay", "--schedule", VICTIM)
    assert replayed.returncode == 0, replayed.stderr
    changes = [line for line in replayed.stdout.splitlines() if VICTIM in line]
    assert len(changes) == 2, replayed.stdout  # growth's refused change is not history
    assert "by alice (signed by team payments)" in changes[0]
    assert "paused by console (signed by team platform)" in changes[1]


def _growths_apply_is_refused_before_publishing(
    settings: KafkaSettings, growth_key: Path, tmp_path: Path
) -> None:
    hijack_file = tmp_path / "hijack.yaml"
    hijack_file.write_text(
        f"schedules:\n  - id: {VICTIM}\n    cron: '0 7 * * *'\n    owner: payments\n"
    )
    applied = _cli(settings, growth_key, "apply", "-f", str(hijack_file))
    assert applied.returncode == 2, applied.stdout + applied.stderr
    assert "team 'growth' may not overwrite it" in applied.stderr
    assert "nothing was published" in applied.stderr


def _the_console_shows_what_the_ticker_holds(
    settings: KafkaSettings, tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    """The schedule's page, once the console read growth's change: payments' definition, the
    change counted as awaiting the ticker."""
    console = start_console(settings, tmp_path / "console", tmp_path)
    processes.append(console)
    base = address_of(console)

    def read_growths_change() -> dict[str, Any] | None:
        try:
            page: dict[str, Any] = api(base, f"/api/v1/schedules/{VICTIM}")
        except urllib.error.HTTPError:
            return None  # 404 until the console read the schedule
        return page if len(page["last_changes"]) == 2 else None

    page = eventually(read_growths_change, timeout_s=30, message="the console did not read it")
    shown = page["schedule"]
    assert shown["labels"] == {}, "the console showed a change its ticker has not taken"
    assert (shown["changed_by"], shown["signed_by"], shown["awaiting_ticker"]) == (
        "alice",
        "payments",
        1,
    )


def _an_administrators_pause_waits_for_the_verdict(
    deployment: dict[str, Any], ledger: Schedule, tmp_path: Path
) -> None:
    """An administrator's pause while growth's change awaits the ticker: refused until the
    ticker judged it, then made on payments' definition; a resume made from the version before
    is refused."""
    settings: KafkaSettings = deployment["settings"]
    platform_key, _ = deployment["keys"]["platform"]
    admin_settings = _as(settings, platform_key)
    with SchedulesClient(admin_settings, changed_by="console", await_judged_s=1.0) as admin:
        with pytest.raises(ScheduleAwaitingTickerError, match="has 1 change"):
            admin.pause(VICTIM, reason="incident")
        deployment["tickers"].append(_start(settings, "t2", tmp_path))
        eventually(
            lambda: _letters_of(settings, OWNERSHIP_REFUSED),
            timeout_s=60,
            message="growth's change was not refused",
        )
        admin.pause(VICTIM, reason="incident")
        eventually(lambda: admin.get(VICTIM).schedule.paused and not admin.get(VICTIM).pending)
        paused = admin.get(VICTIM)
        assert paused.schedule == ledger.model_copy(update={"paused": True})
        assert (paused.changed_by, paused.signed_by) == ("console", "platform")

        # A resume made from the version before the pause: the pause stands.
        stale = ScheduleChange(
            "resumed", VICTIM, ledger, paused.revision + 1, if_version=paused.offset - 1
        )
        admin.publish([stale], reason="made from an old read")
        eventually(
            lambda: _letters_of(settings, STALE_CHANGE),
            timeout_s=30,
            message="a change made from a version left since was not refused",
        )
        assert admin.get(VICTIM).schedule.paused
        assert admin.get(VICTIM).offset == paused.offset
