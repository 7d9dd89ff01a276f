"""The ticker's turn logic on the in-memory cluster (tests/fakes), with the fake clock.

Real RocksDB stores, fake Kafka: catch-up slicing, take-over order, abort and rebuild, stores
written only after a commit, fencing on a stale generation and of a zombie producer. The same
paths against a real broker are in tests/broker/test_ticker_*.py.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from kairos.services.ticker.rebuild import RebuildError
from kairos.streams.kafka.topics import TopicRole
from tests.fakes.kafka import FakeProducer
from tests.fakes.kafka_log import Transaction
from tests.fakes.ticker_world import START, World, turns


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _every(schedule_id: str, seconds: int) -> dict[str, object]:
    return {"id": schedule_id, "every": f"{seconds}s", "start_at": START.isoformat()}


def test_every_occurrence_fires_once_in_order_across_turns(world: World) -> None:
    world.publish(_every("a", 10), _every("b", 7))
    ticker, _ = world.ticker()
    ticker.connect()
    while world.clock() < START + timedelta(minutes=5):
        ticker.turn()
    ticker.disconnect()
    fired = world.run_ids()
    assert set(fired.values()) == {1}, "an occurrence fired twice"
    for schedule_id, every_s in (("a", 10), ("b", 7)):
        mine = sorted(r["nominal_at"] for r in world.runs() if r["schedule_id"] == schedule_id)
        expected = [START + timedelta(seconds=every_s * n) for n in range(len(mine))]
        assert mine == expected
        assert len(mine) >= 300 // every_s


def test_only_schedules_due_soon_stay_decoded_and_the_rest_fire_from_the_store(
    world: World,
) -> None:
    daily = {"id": "daily", "cron": "0 3 * * *", "timezone": "Europe/Berlin"}
    world.publish(_every("minutely", 60), _every("ten-minutely", 600), daily)
    ticker, _ = world.ticker()
    ticker.connect()
    decoded = []
    while world.clock() < START + timedelta(minutes=25):
        ticker.turn()
        decoded.append((world.clock(), ticker.metrics.schedules_decoded._value.get()))
    ticker.disconnect()
    # Past each ten-minute fire, only the minutely schedule (next due within two minutes) is
    # held decoded; the daily one never was after its intake.
    for minute in (1, 11, 21):
        at = START + timedelta(minutes=minute, seconds=30)
        assert next(count for when, count in decoded if when >= at) == 1
    assert max(count for _, count in decoded) == 2
    fired = world.run_ids()
    assert set(fired.values()) == {1}, "an occurrence fired twice"
    ten = sorted(r["nominal_at"] for r in world.runs() if r["schedule_id"] == "ten-minutely")
    assert ten == [START + timedelta(minutes=m) for m in (0, 10, 20)]
    minutely = [r for r in world.runs() if r["schedule_id"] == "minutely"]
    assert len(minutely) == 26
    assert not [r for r in world.runs() if r["schedule_id"] == "daily"]


def test_a_backlog_is_fired_in_slices_and_on_time_fires_go_first(world: World) -> None:
    # Thirty schedules down for two hours each owe 120 late occurrences; one more is due now.
    world.publish(*(_every(f"late-{n}", 60) for n in range(30)))
    world.clock.advance(2 * 3600)
    world.publish(_every("now", 1) | {"start_at": world.clock().isoformat()})
    ticker, _ = world.ticker(catchup_per_transaction=50)
    ticker.connect()
    turns(ticker, 3)
    runs_topic = world.topic(TopicRole.RUNS)
    first = world.kafka.visible(runs_topic)
    assert first, "nothing fired"
    for _ in range(200):
        ticker.turn()
    per_transaction: Counter[int] = Counter()
    for record in world.kafka.visible(runs_topic):
        value = world.codecs.run_requested.decode(record.value or b"")
        if value["lateness_ms"] > 60_000:  # beyond the misfire grace: a catch-up
            assert record.transaction is not None
            per_transaction[id(record.transaction)] += 1
    assert max(per_transaction.values()) <= 50, "a transaction carried more than its catch-up slice"
    late = [r for r in world.runs() if r["schedule_id"] != "now"]
    assert len(late) == 30 * 121, "the backlog was not fired in full"
    on_time = [r["nominal_at"] for r in world.runs() if r["schedule_id"] == "now"]
    assert min(on_time) == START + timedelta(hours=2)
    # The first transaction that fired anything carried the on-time run.
    first_transaction = first[0].transaction
    carried = [
        world.codecs.run_requested.decode(r.value or b"")["schedule_id"]
        for r in first
        if r.transaction is first_transaction
    ]
    assert "now" in carried
    ticker.disconnect()


def _hold_offsets(world: World, partition: int, group: str) -> Transaction:
    """A previous owner's transaction, open, carrying offsets for `partition`."""
    transaction = world.kafka.begin("previous-owner")
    transaction.group = group
    topic = world.topic(TopicRole.SCHEDULES)
    transaction.offsets[(topic, partition)] = TopicPartition(topic, partition, 0)
    return transaction


def test_a_partition_whose_offsets_are_unstable_does_not_hold_up_the_others(
    world: World,
) -> None:
    mine = [f"s{n}" for n in range(40)]
    world.publish(*(_every(sid, 5) for sid in mine))
    ticker, _ = world.ticker()
    group = ticker.settings.group(world.settings)
    pending = _hold_offsets(world, 0, group)
    ticker.connect()
    turns(ticker, 40)
    assert sorted(ticker.owned) == [1], "the settled partition was not taken over"
    assert ticker.session is not None and 0 in ticker.session.take_over.arriving
    fired_partitions = {world.partition_of(r["schedule_id"]) for r in world.runs()}
    assert fired_partitions == {1}
    world.kafka.end(pending, "aborted")
    turns(ticker, 40)
    assert sorted(ticker.owned) == [0, 1]
    assert {world.partition_of(r["schedule_id"]) for r in world.runs()} == {0, 1}
    ticker.disconnect()


@pytest.mark.parametrize(
    ("operation", "error"),
    [
        ("commit_transaction", KafkaError(KafkaError._TIMED_OUT, txn_requires_abort=True)),
        ("send_offsets_to_transaction", KafkaError(KafkaError._TRANSPORT)),
        ("flush", KafkaError(KafkaError._MSG_TIMED_OUT)),
    ],
)
def test_a_failed_transaction_moves_no_store_and_fires_once_after_the_rebuild(
    world: World, operation: str, error: KafkaError
) -> None:
    world.publish(_every("a", 10))
    ticker, _ = world.ticker()
    ticker.connect()
    turns(ticker, 5)
    assert world.run_ids() == Counter({"a@2026-03-02T09:00:00Z": 1})
    owned = ticker.owned[world.partition_of("a")]
    offset_before = owned.store.changelog_offset
    due_before = owned.state("a")
    assert due_before is not None
    world.clock.advance(10)
    world.kafka.fail_next(operation, error)
    with pytest.raises(RebuildError):
        turns(ticker, 5)
    assert owned.store.changelog_offset == offset_before, "the store moved on an abort"
    assert owned.state("a") is due_before
    assert len(world.run_ids()) == 1, "an aborted run became visible"
    ticker.disconnect()
    ticker.connect()
    turns(ticker, 5)
    fired = world.run_ids()
    assert fired["a@2026-03-02T09:00:10Z"] == 1
    assert set(fired.values()) == {1}
    ticker.disconnect()


def test_a_commit_on_a_stale_generation_is_fenced_and_nothing_of_it_is_visible(
    world: World,
) -> None:
    world.publish(_every("a", 10))
    ticker, _ = world.ticker()
    group = ticker.settings.group(world.settings)
    ticker.connect()
    turns(ticker, 5)
    world.clock.advance(10)
    # The group moves on between the turn's consume and its commit (a member joined or left).
    world.kafka.before_next("send_offsets_to_transaction", lambda: world.kafka.rebalance(group))
    with pytest.raises(RebuildError, match="stale"):
        ticker.turn()
    assert list(world.run_ids()) == ["a@2026-03-02T09:00:00Z"]
    ticker.disconnect()
    ticker.connect()
    turns(ticker, 5)
    assert set(world.run_ids().values()) == {1}
    assert "a@2026-03-02T09:00:10Z" in world.run_ids()
    ticker.disconnect()


def test_a_zombie_whose_transactional_id_was_taken_commits_nothing(world: World) -> None:
    world.publish(_every("a", 10))
    zombie, _ = world.ticker("same")
    zombie.connect()
    turns(zombie, 5)
    successor, _ = world.ticker("same")
    # The successor's producer takes the transactional id: the zombie's is fenced.
    successor.connect()
    world.clock.advance(10)
    with pytest.raises(RebuildError, match="fenced"):
        turns(zombie, 5)
    assert list(world.run_ids()) == ["a@2026-03-02T09:00:00Z"]
    zombie.disconnect()
    successor.disconnect()


def _yearly(schedule_id: str) -> dict[str, object]:
    return {"id": schedule_id, "cron": "0 0 1 1 *"}


def test_a_cold_restore_goes_in_slices_while_the_owned_partition_keeps_firing(
    world: World,
) -> None:
    leaver, _ = world.ticker("leaver")
    survivor, _ = world.ticker("survivor")
    leaver.connect()
    survivor.connect()
    turns(leaver, 3)
    turns(survivor, 3)
    big, own = sorted(leaver.owned), sorted(survivor.owned)
    assert len(big) == 1 and len(own) == 1, "the two tickers did not share the partitions"
    big_ids = [f"big-{n}" for n in range(20_000) if world.partition_of(f"big-{n}") == big[0]]
    world.publish(*(_yearly(sid) for sid in big_ids))
    start = world.clock().replace(microsecond=0) + timedelta(seconds=1)
    own_id = next(f"own-{n}" for n in range(100) if world.partition_of(f"own-{n}") == own[0])
    world.publish(_every(own_id, 1) | {"start_at": start.isoformat()})
    while leaver.owned[big[0]].store.count < len(big_ids):
        leaver.turn()
    leaver.disconnect()
    restore_turns = 0
    while big[0] not in survivor.owned:
        world.clock.advance(1)
        survivor.turn()
        restore_turns += 1
        due = world.clock().replace(microsecond=0)
        fired = {r["nominal_at"] for r in world.runs() if r["schedule_id"] == own_id}
        assert due in fired, f"the survivor's own fire due at {due} waited for the restore"
    assert restore_turns >= 3, "the restore did not go in slices"
    assert survivor.owned[big[0]].store.count == len(big_ids)
    survivor.disconnect()


def test_the_run_loop_rebuilds_after_a_failed_transaction_and_goes_on(world: World) -> None:
    world.publish(_every("a", 10))
    ticker, clients = world.ticker()
    world.kafka.fail_next(
        "commit_transaction", KafkaError(KafkaError._TIMED_OUT, txn_requires_abort=True)
    )
    stop = threading.Event()
    loop = threading.Thread(target=ticker.run, args=(stop,))
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while len(world.run_ids()) < 3 and time.monotonic() < deadline and loop.is_alive():
            time.sleep(0.05)
    finally:
        stop.set()
        loop.join(30)
    assert not loop.is_alive()
    assert len(clients.producers) >= 2, "the failed transaction did not rebuild the session"
    fired = world.run_ids()
    assert len(fired) >= 3 and set(fired.values()) == {1}


def test_a_restore_held_back_by_an_open_transaction_waits_and_the_rest_fires(
    world: World,
) -> None:
    first, _ = world.ticker("first")
    first.connect()
    turns(first, 3)
    held = world.partition_of("held")
    other = next(f"o{n}" for n in range(100) if world.partition_of(f"o{n}") != held)
    # A stray transaction opens on the changelog before the owner's last commit there: the
    # committed point lies beyond the last stable offset until it ends.
    stray = FakeProducer(world.kafka, "stray")
    stray.init_transactions()
    stray.begin_transaction()
    stray.produce(world.topic(TopicRole.CHANGELOG), b"x", b"stray", held)
    world.publish(_every("held", 5), _every(other, 5))
    turns(first, 5)
    first.disconnect()
    second, _ = world.ticker("second")
    second.connect()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        world.clock.advance(1)
        second.turn()
    assert held not in second.owned, "restored short of the committed point"
    assert any(r["schedule_id"] == other and r["ticker_instance"] == "second" for r in world.runs())
    stray.abort_transaction()
    deadline = time.monotonic() + 5
    while held not in second.owned and time.monotonic() < deadline:
        second.turn()
    assert held in second.owned
    assert second.owned[held].state("held") is not None
    second.disconnect()


@pytest.mark.parametrize(("max_wait_s", "prepared"), [(0.1, True), (0.01, False)])
def test_fires_prepared_in_idle_time_are_counted_as_decided_ahead(
    tmp_path: Path, max_wait_s: float, prepared: bool
) -> None:
    """`kairos_ticker_decided_ahead` against `kairos_ticker_fires`: a herd prepared in idle time
    is all decided ahead; a ticker that never waits 20 ms (no idle time) decides each fire at
    its instant."""
    world = World(tmp_path, partitions=2)
    world.publish(*({"id": f"herd-{n:03d}", "cron": "* * * * *"} for n in range(50)))
    ticker, _ = world.ticker(max_wait_s=max_wait_s)
    ticker.connect()
    herd_at = (world.clock() + timedelta(minutes=2)).replace(second=0, microsecond=0)
    world.clock.now = herd_at - timedelta(seconds=20)
    turns(ticker, 40)
    samples = ticker.metrics.registry.get_sample_value
    fires_before = samples("kairos_ticker_fires_total") or 0.0
    world.clock.now = herd_at
    turns(ticker, 3)
    ticker.disconnect()
    assert (samples("kairos_ticker_fires_total") or 0.0) - fires_before == 50
    assert samples("kairos_ticker_decided_ahead_total") == (50 if prepared else 0)


def test_schedules_firing_every_minute_are_prepared_in_idle_time_minute_after_minute(
    tmp_path: Path,
) -> None:
    """Idle time's walk runs two minutes ahead: a schedule fired and due again within them is
    prepared from the partition's list of those behind the walk, not only the first time."""
    world = World(tmp_path, partitions=2)
    minutely = {"cron": "* * * * *", "jitter": "PT1M"}
    world.publish(*({"id": f"m-{n:03d}", **minutely} for n in range(600)))
    ticker, _ = world.ticker()
    ticker.connect()
    turns(ticker, 20)
    samples = ticker.metrics.registry.get_sample_value
    world.clock.now = world.clock() + timedelta(minutes=2)
    turns(ticker, 20)  # what the two minutes owed
    fires_before = samples("kairos_ticker_fires_total") or 0.0
    ahead_before = samples("kairos_ticker_decided_ahead_total") or 0.0
    end = world.clock() + timedelta(minutes=2)
    while world.clock() < end:
        world.clock.now = world.clock() + timedelta(milliseconds=200)
        turns(ticker, 2)
    ticker.disconnect()
    fires = (samples("kairos_ticker_fires_total") or 0.0) - fires_before
    ahead = (samples("kairos_ticker_decided_ahead_total") or 0.0) - ahead_before
    assert fires >= 1_150, "two minutes of 600 every-minute schedules"
    assert ahead / fires > 0.9, f"{ahead:.0f} of {fires:.0f} fires decided ahead"
    assert set(world.run_ids().values()) == {1}, "an occurrence fired twice"
