"""Re-runs on the in-memory cluster (tests/fakes): a budget of their own, a request fired whole.

A backfill as large as a request may be is fired in the transaction that takes it: it takes
none of the catch-up budget, so a backlog on the ticker's other partition keeps being caught up
beside it, and the change published after it on its own partition is taken in that same turn.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.reruns import MAX_BACKFILL_RUNS
from kairos.core.run_id import RERUN_MARK, rerun_request_of
from kairos.core.schedule import parse_schedule
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.records import schedule_event_record
from tests.fakes.kafka import FakeProducer
from tests.fakes.ticker_world import START, World, turns
from tests.helpers import upserted_event

CATCHUP = 50
_HOURS_AGO = START - timedelta(hours=3)


def _on(world: World, partition: int, prefix: str) -> str:
    return next(
        f"{prefix}-{n}" for n in range(100) if world.partition_of(f"{prefix}-{n}") == partition
    )


def _request(
    world: World, schedule_id: str, runs: int, then: str, request_ids: tuple[str, ...] = ("big",)
) -> None:
    """A backfill of `runs` seconds of `schedule_id` for each of `request_ids`, and right after
    them on the same partition the creation of the schedule `then`."""
    producer = FakeProducer(world.kafka, f"requester-{uuid.uuid4()}")
    producer.init_transactions()
    producer.begin_transaction()
    topic, partition = world.topic(TopicRole.SCHEDULES), world.partition_of(schedule_id)
    for request_id in request_ids:
        key = f"{schedule_id}{RERUN_MARK}{request_id}"
        value = world.codecs.schedule_event.encode(_backfill(world, schedule_id, runs, request_id))
        producer.produce(topic, value, key, partition)
    later = parse_schedule({"id": then, "every": "1h", "start_at": world.clock().isoformat()})
    event = upserted_event(later, world.clock())
    producer.produce(topic, world.codecs.schedule_event.encode(event), then, partition)
    producer.commit_transaction()


def _backfill(world: World, schedule_id: str, runs: int, request_id: str) -> dict[str, object]:
    now = world.clock()
    request = RerunRequest(
        request_id,
        schedule_id,
        RerunKind.BACKFILL,
        now - runs * timedelta(seconds=1),
        now - timedelta(seconds=1),
        None,
        "ops",
        now,
        None,
    )
    return schedule_event_record(
        schedule_id,
        "rerun_requested",
        None,
        changed_by="ops",
        changed_at=now,
        reason=None,
        rerun=request,
    )


def test_a_whole_request_fires_in_one_transaction_beside_the_other_partitions_catch_up(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    asked, behind = _on(world, 0, "asked"), _on(world, 1, "behind")
    then = _on(world, 0, "then")
    every = {"every": "1s", "start_at": _HOURS_AGO.isoformat()}
    world.publish({"id": behind, **every})
    world.clock.advance(600)  # ten minutes nobody fired: `behind` owes a backlog
    world.publish({"id": asked, **every})  # owes none: created now
    _request(world, asked, MAX_BACKFILL_RUNS, then)
    ticker, _ = world.ticker(catchup_per_transaction=CATCHUP)
    ticker.connect()

    def reruns() -> int:
        return sum(1 for run in world.runs() if rerun_request_of(run["run_id"]) == "big")

    for _ in range(20):
        ticker.turn()
        if reruns():
            break
    assert reruns() == MAX_BACKFILL_RUNS, "the request was not fired whole in one transaction"
    fired = world.kafka.visible(world.topic(TopicRole.RUNS))
    transaction = next(
        record.transaction
        for record in fired
        if rerun_request_of(world.codecs.run_requested.decode(record.value or b"")["run_id"])
    )
    caught_up = [
        run
        for record in fired
        if record.transaction is transaction
        for run in [world.codecs.run_requested.decode(record.value or b"")]
        if run["schedule_id"] == behind and run["lateness_ms"] > 60_000
    ]
    assert len(caught_up) == CATCHUP, "the request took the catch-up budget of the other partition"
    # The change after the request on its partition was taken in the same turn: it fires.
    turns(ticker, 3)
    assert any(run["schedule_id"] == then for run in world.runs()), "the request held its partition"
    assert set(world.run_ids().values()) == {1}
    ticker.disconnect()


def test_requests_on_two_partitions_each_fire_whole_and_none_waits_on_the_others(
    tmp_path: Path,
) -> None:
    """Two requests as large as a request may be on one partition, one on another: the first of
    each partition fires in the first transaction (the room is a share, not a queue another
    partition's requests can fill), the second in the next; every request in one transaction,
    and each partition takes the change after its requests once they fired."""
    world = World(tmp_path)
    first, second = _on(world, 0, "first"), _on(world, 1, "second")
    then_first, then_second = _on(world, 0, "then-first"), _on(world, 1, "then-second")
    for schedule_id in (first, second):
        world.publish({"id": schedule_id, "every": "1s", "start_at": _HOURS_AGO.isoformat()})
    _request(world, first, MAX_BACKFILL_RUNS, then_first, ("a", "b"))
    _request(world, second, MAX_BACKFILL_RUNS, then_second, ("c",))
    ticker, _ = world.ticker()
    ticker.connect()
    turns(ticker, 12)
    fired = world.kafka.visible(world.topic(TopicRole.RUNS))
    decoded = [(r.transaction, world.codecs.run_requested.decode(r.value or b"")) for r in fired]
    transactions: dict[str, set[int]] = {}
    for transaction, run in decoded:
        request_id = rerun_request_of(run["run_id"])
        if request_id is not None:
            transactions.setdefault(request_id, set()).add(id(transaction))
    assert {r: len(t) for r, t in transactions.items()} == {"a": 1, "b": 1, "c": 1}
    assert transactions["a"] == transactions["c"], "a partition's request waited on another's"
    assert transactions["b"] != transactions["a"], "two requests filled one transaction"
    created = {run["schedule_id"] for _, run in decoded}
    assert {then_first, then_second} <= created, "a change after the requests was not taken"
    assert set(world.run_ids().values()) == {1}
    ticker.disconnect()
