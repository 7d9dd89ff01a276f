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
from kairos.streams.records import schedule_event_record
from kairos.streams.topics import TopicRole
from tests.fakes.kafka import FakeProducer
from tests.fakes.ticker_world import START, World, turns
from tests.helpers import upserted_event

CATCHUP = 50


def _on(world: World, partition: int, prefix: str) -> str:
    return next(
        f"{prefix}-{n}" for n in range(100) if world.partition_of(f"{prefix}-{n}") == partition
    )


def _request(world: World, schedule_id: str, runs: int, then: str) -> None:
    """A backfill of `runs` seconds of `schedule_id`, and right after it on the same partition
    the creation of the schedule `then`."""
    now = world.clock()
    request = RerunRequest(
        "big",
        schedule_id,
        RerunKind.BACKFILL,
        now - runs * timedelta(seconds=1),
        now - timedelta(seconds=1),
        None,
        "ops",
        now,
        None,
    )
    event = schedule_event_record(
        schedule_id,
        "rerun_requested",
        None,
        changed_by="ops",
        changed_at=now,
        reason=None,
        rerun=request,
    )
    later = parse_schedule({"id": then, "every": "1h", "start_at": now.isoformat()})
    producer = FakeProducer(world.kafka, f"requester-{uuid.uuid4()}")
    producer.init_transactions()
    producer.begin_transaction()
    topic, partition = world.topic(TopicRole.SCHEDULES), world.partition_of(schedule_id)
    key = f"{schedule_id}{RERUN_MARK}big"
    producer.produce(topic, world.codecs.schedule_event.encode(event), key, partition)
    producer.produce(
        topic, world.codecs.schedule_event.encode(upserted_event(later, now)), then, partition
    )
    producer.commit_transaction()


def test_a_whole_request_fires_in_one_transaction_beside_the_other_partitions_catch_up(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    asked, behind = _on(world, 0, "asked"), _on(world, 1, "behind")
    then = _on(world, 0, "then")
    every = {"every": "1s", "start_at": (START - timedelta(hours=3)).isoformat()}
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
