"""`pause_on_failure` on the ticker (in-memory cluster, real RocksDB): the ticker that fires a
schedule follows the runs that ended and pauses the schedule after N failed in a row."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kairos.core.run_id import run_id
from kairos.services.ticker.service import Ticker
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.run_outcomes import RunOutcome
from kairos.streams.wire.schedule_events import IF_VERSION_HEADER
from tests.fakes.kafka import FakeTickerClients
from tests.fakes.ticker_world import START, World

FLAKY = {"id": "ops.flaky", "every": "10s", "start_at": START.isoformat(), "pause_on_failure": 2}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _fired(world: World) -> list[datetime]:
    return sorted(run["nominal_at"] for run in world.runs() if run["schedule_id"] == "ops.flaky")


def _until(ticker: Ticker, world: World, seconds: float) -> None:
    until = world.clock() + timedelta(seconds=seconds)
    while world.clock() < until:
        ticker.turn()


def _changes(world: World) -> list[tuple[dict[str, Any], dict[str, bytes]]]:
    """The changes the ticker published: (event, headers)."""
    records = world.kafka.visible(world.topic(TopicRole.SCHEDULES))
    changes = [
        (world.codecs.schedule_event.decode(r.value), dict(r.headers or []))
        for r in records
        if r.value is not None
    ]
    return [(event, headers) for event, headers in changes if event["changed_by"] == "ticker:t1"]


def _end(clients: FakeTickerClients, nominal: datetime, failure: str | None) -> None:
    clients.outcomes.published.append(RunOutcome("ops.flaky", nominal, failure))


def test_the_ticker_pauses_a_schedule_after_n_failed_runs_in_a_row(world: World) -> None:
    world.publish(FLAKY)
    ticker, clients = world.ticker()
    ticker.connect()
    _until(ticker, world, 35)
    first, second, third, fourth = _fired(world)[:4]
    _end(clients, first, "exit status 1")
    _end(clients, second, None)  # a success breaks the streak
    _end(clients, third, "exit status 1")
    _until(ticker, world, 1)
    assert _changes(world) == [], "paused after a streak of one"
    _end(clients, fourth, "exit status 1; output: disk full")
    _until(ticker, world, 1)
    (event, headers), *_ = _changes(world)
    assert event["change"] == "paused"
    assert event["changed_by"] == "ticker:t1"
    reason = "paused after 2 failed runs in a row: exit status 1; output: disk full"
    assert event["reason"] == reason
    assert headers[IF_VERSION_HEADER] == b"0"
    fired = len(_fired(world))
    _until(ticker, world, 60)
    assert len(_fired(world)) == fired, "the schedule fired after its pause was read back"
    ticker.disconnect()


def test_outcomes_arriving_out_of_order_count_in_nominal_order(world: World) -> None:
    world.publish(FLAKY)
    ticker, clients = world.ticker()
    ticker.connect()
    _until(ticker, world, 35)
    first, second, third, _ = _fired(world)[:4]
    _end(clients, third, "failed")
    _end(clients, first, "failed")
    _end(clients, second, None)  # the latest two by nominal instant: a success, then a failure
    _until(ticker, world, 1)
    assert _changes(world) == []
    ticker.disconnect()


def test_runs_fired_before_the_definition_in_force_do_not_count(world: World) -> None:
    world.publish(FLAKY)
    ticker, clients = world.ticker()
    ticker.connect()
    _until(ticker, world, 25)
    before = _fired(world)
    world.publish({**FLAKY, "description": "a change starts the count again"})
    _until(ticker, world, 1)
    for nominal in before:
        _end(clients, nominal, "failed")
    _until(ticker, world, 1)
    assert _changes(world) == [], "runs of the old definition counted"
    ticker.disconnect()


def test_outcomes_of_another_tickers_runs_or_of_other_schedules_are_not_counted(
    world: World,
) -> None:
    world.publish(FLAKY)
    ticker, clients = world.ticker()
    ticker.connect()
    _until(ticker, world, 25)
    later = START + timedelta(hours=1)
    # Fired by nobody here: their nominal instants precede nothing this ticker fired.
    for minutes in (-20, -10):
        _end(clients, START + timedelta(minutes=minutes), "failed")
    clients.outcomes.published.append(RunOutcome("someone.else", later, "failed"))
    _until(ticker, world, 1)
    assert _changes(world) == []
    assert run_id("ops.flaky", START) in {run["run_id"] for run in world.runs()}
    ticker.disconnect()
