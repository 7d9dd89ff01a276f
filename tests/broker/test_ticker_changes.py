"""Schedule changes against the real broker: bounded settlement, and floors that outlive deletes.

The tickers run in this process and the test takes their turns, so it can move their clock
and count what each transaction fired.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kairos.core.run_id import parse_run_id
from kairos.core.schedule import Schedule
from kairos.services.ticker.service import Ticker, TickerSettings, utc_now
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually, unique_name, upserted_event
from tests.kafka_helpers import read_topic

CODECS = make_codecs()
FIRES = "kairos_ticker_fires_total"


def ticker_of(
    settings: KafkaSettings,
    state_dir: Path,
    group: str,
    clock: Callable[[], datetime] = utc_now,
    **overrides: int,
) -> Ticker:
    """A connected ticker whose turns the test takes, with an instance (and so a transactional
    id) of its own: tests running beside it on the broker must not fence it."""
    ticker = Ticker(
        settings,
        TickerSettings(
            instance=unique_name("t"),
            state_dir=state_dir,
            group_id=group,
            session_timeout_ms=3000,
            **overrides,
        ),
        clock=clock,
    )
    ticker.connect()
    eventually(
        lambda: ticker.turn() or len(ticker.owned) == settings.schedules_partitions,
        timeout_s=60,
        interval_s=0,
        message="the ticker did not take every partition over",
    )
    return ticker


def fired(ticker: Ticker) -> float:
    return ticker.metrics.registry.get_sample_value(FIRES) or 0.0


def run_ids_of(settings: KafkaSettings, schedule_id: str) -> list[str]:
    """Every committed run id of the schedule (read_committed), in nominal order."""
    records = read_topic(
        settings.bootstrap_servers,
        settings.layout.name(TopicRole.RUNS),
        CODECS.run_requested.decode,
    )
    ids = [str(value["run_id"]) for _, value in records if value["schedule_id"] == schedule_id]
    return sorted(ids, key=lambda run_id: parse_run_id(run_id)[1])


@dataclass
class HourBehind:
    """Tickers of one group whose clock runs an hour behind until `catch_up()`, settling at
    most `budget` occurrences a transaction; `per_turn` counts what each counted turn fired."""

    settings: KafkaSettings
    budget: int
    group: str = field(default_factory=lambda: unique_name("tickers"))
    shift: timedelta = timedelta(hours=-1)
    per_turn: list[float] = field(default_factory=list)

    def clock(self) -> datetime:
        return datetime.now(UTC) + self.shift

    def catch_up(self) -> None:
        self.shift = timedelta(0)

    def ticker(self, state_dir: Path) -> Ticker:
        return ticker_of(
            self.settings,
            state_dir,
            self.group,
            clock=self.clock,
            catchup_per_transaction=self.budget,
        )

    def turn_counted(self, ticker: Ticker) -> bool:
        """One turn; whether the edit is applied."""
        before = fired(ticker)
        ticker.turn()
        self.per_turn.append(fired(ticker) - before)
        states = [owned.state("s") for owned in ticker.owned.values()]
        return any(s is not None and s.schedule.description == "edited" for s in states)

    def turns_that_fired(self) -> int:
        return sum(1 for n in self.per_turn if n > 0)


def create_then_edit(settings: KafkaSettings, ticker: Ticker, schedule: dict[str, str]) -> None:
    """Publish the schedule, let the ticker take it in, then publish it `edited`."""
    with SchedulesClient(settings, changed_by="test") as client:
        client.upsert(schedule)

        def created() -> bool:
            ticker.turn()
            return any(owned.state(schedule["id"]) is not None for owned in ticker.owned.values())

        eventually(created, timeout_s=30, interval_s=0)
        client.upsert({**schedule, "description": "edited"})


def assert_every_second_fired_once_through(
    settings: KafkaSettings, schedule_id: str, edited_at: datetime
) -> None:
    """Every second from the first owed to past the edit, none missing: the old definition
    settled everything it owed before the edit, and the new one took over from there."""
    run_ids = run_ids_of(settings, schedule_id)
    assert len(run_ids) == len(set(run_ids)), "a run id was committed twice"
    nominals = [parse_run_id(run_id)[1] for run_id in run_ids]
    assert nominals == [nominals[0] + timedelta(seconds=n) for n in range(len(nominals))]
    assert nominals[-1] >= edited_at - timedelta(seconds=1)
    assert len(nominals) >= 3600


def test_an_edit_of_a_schedule_an_hour_behind_settles_in_bounded_transactions(
    kafka_settings: KafkaSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kairos.services.ticker.service")
    # The ticker's clock runs an hour behind, then catches up at once: an hour of one-second
    # occurrences is owed, and the edit arrives before any of it is decided.
    budget = 300
    tickers = HourBehind(kafka_settings, budget)
    anchor = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    every_second = {"id": "s", "every": "1s", "start_at": anchor.isoformat()}

    first = tickers.ticker(tmp_path / "first")
    try:
        create_then_edit(kafka_settings, first, every_second)
        edited_at = datetime.now(UTC)
        tickers.catch_up()
        eventually(
            lambda: not tickers.turn_counted(first) and tickers.turns_that_fired() >= 3,
            timeout_s=60,
            interval_s=0,
            message="the edit did not settle in slices",
        )
    finally:
        first.disconnect()
    # Mid-settlement, another host takes the partitions over, restoring cold: the held state
    # and the offset held at the edit bring it to settle on where the first one stopped.
    second = tickers.ticker(tmp_path / "second")
    try:
        eventually(
            lambda: tickers.turn_counted(second),
            timeout_s=120,
            interval_s=0,
            message="edit not applied",
        )
    finally:
        second.disconnect()

    # Bounded by the catch-up budget, plus one schedule's catch-up slice should a turn have
    # decided the backlog before the edit reached it: never the whole hour in one transaction.
    assert max(tickers.per_turn) <= budget + 100, tickers.per_turn
    assert tickers.turns_that_fired() >= 3600 // (budget + 100)
    assert "schedule change held" in caplog.text
    assert_every_second_fired_once_through(kafka_settings, "s", edited_at)


def recreate_raw(settings: KafkaSettings, schedule: Schedule, changed_at: datetime) -> None:
    """Publish an `upserted` event whose `changed_at` says the schedule came back then."""
    event = upserted_event(schedule, changed_at, "re-created by a producer with a lagging clock")
    producer = Producer(settings.client_config(acks="all"))
    producer.produce(
        settings.layout.name(TopicRole.SCHEDULES),
        key=schedule.id.encode(),
        value=CODECS.schedule_event.encode(event),
    )
    assert producer.flush(30) == 0


def test_a_deleted_and_re_created_schedule_never_fires_a_run_id_again(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    group = unique_name("tickers")
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    schedule = Schedule.model_validate({"id": "r", "every": "1s", "start_at": start.isoformat()})

    def turn_until_fired(ticker: Ticker, count: int) -> None:
        target = fired(ticker) + count
        eventually(
            lambda: ticker.turn() or fired(ticker) >= target,
            timeout_s=60,
            interval_s=0,
            message=f"{count} more runs did not fire",
        )

    def turn_until_gone(ticker: Ticker) -> None:
        eventually(
            lambda: ticker.turn() or all(o.state("r") is None for o in ticker.owned.values()),
            timeout_s=30,
            interval_s=0,
        )

    first = ticker_of(kafka_settings, tmp_path / "first", group)
    try:
        with SchedulesClient(kafka_settings, changed_by="test") as client:
            client.upsert(schedule)
            turn_until_fired(first, 3)
            client.delete("r")
            turn_until_gone(first)
            # Back with a changed_at at its first fire: three fired occurrences owed again.
            recreate_raw(kafka_settings, schedule, changed_at=start)
            turn_until_fired(first, 2)
            client.delete("r")
            turn_until_gone(first)
    finally:
        first.disconnect()
    # A fresh host: the floor must come back from the changelog, the store's source of truth.
    second = ticker_of(kafka_settings, tmp_path / "fresh", group)
    try:
        cold = second.metrics.registry.get_sample_value(
            "kairos_ticker_restored_records_total", {"mode": "cold"}
        )
        assert cold, "the fresh host did not restore cold from the changelog"
        recreate_raw(kafka_settings, schedule, changed_at=start)
        turn_until_fired(second, 2)
    finally:
        second.disconnect()

    run_ids = run_ids_of(kafka_settings, "r")
    twice = [run_id for run_id, n in Counter(run_ids).items() if n > 1]
    assert twice == [], f"run ids committed twice: {twice}"
    assert len(run_ids) >= 7
