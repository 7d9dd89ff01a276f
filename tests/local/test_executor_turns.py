"""The executor's turn logic on the in-memory cluster (tests/fakes), with a real SQLite store.

Duplicates suppressed and counted, offsets committed only once a claim is durable (a claim that
fails, a crash between claim and commit), bad records dead-lettered once, a revoked partition's
marks committed before it goes, a rebalance callback's failure raised after `consume`, run
events published from the outbox. The same promises against a real broker, with real executor
processes, are in tests/broker/test_executor_*.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from kairos.services.executor.fleet import SeparateStoresError
from kairos.services.executor.service import Executor
from kairos.streams.kafka.topics import TopicRole
from tests.fakes.executor_world import ExecutorWorld, turn_until


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ExecutorWorld]:
    world = ExecutorWorld(tmp_path)
    yield world
    world.close()


def _metric(executor: Executor, name: str) -> float:
    value = executor.metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


def _finished(world: ExecutorWorld, *run_ids: str) -> bool:
    return all(world.steps(run)[-1:] == ["succeeded"] for run in run_ids)


def _rows(world: ExecutorWorld, table: str) -> int:
    with sqlite3.connect(world.root / "shared" / "dedupe.sqlite3") as db:
        count: int = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return count


def test_a_run_delivered_twice_is_executed_once_and_the_duplicates_counted(
    world: ExecutorWorld,
) -> None:
    executor, _ = world.executor()
    executor.connect()
    request = world.request("pay")
    run = request["run_id"]
    world.publish(request, request)
    turn_until([executor], lambda: _finished(world, run), "the run succeeded")
    world.publish(request)  # a ticker re-publishing it, after it finished
    partition, offset = world.publish(world.request("other"))[0]
    turn_until([executor], lambda: _finished(world, run, world.request("other")["run_id"]), "next")
    executor.disconnect()
    assert world.executed[run] == 1
    assert world.steps(run) == ["started", "succeeded"]
    assert _metric(executor, "kairos_executor_duplicates_suppressed_total") == 2
    assert world.committed(executor, partition) == offset + 1


def test_a_failed_claim_marks_nothing_and_the_batch_is_claimed_again(world: ExecutorWorld) -> None:
    executor, _ = world.executor()
    executor.connect()
    request = world.request("pay")
    # The store refuses every claim (a real database error, raised by SQLite itself).
    with sqlite3.connect(world.root / "shared" / "dedupe.sqlite3") as db:
        db.execute(
            "CREATE TRIGGER refuse_claims BEFORE INSERT ON kairos_runs "
            "BEGIN SELECT RAISE(ABORT, 'claims refused by the test'); END"
        )
    partition, offset = world.publish(request)[0]
    for _ in range(5):
        executor.turn()
    assert _metric(executor, "kairos_executor_store_errors_total") >= 5
    assert world.committed(executor, partition) is None, "an unclaimed record was committed"
    assert world.executed[request["run_id"]] == 0
    with sqlite3.connect(world.root / "shared" / "dedupe.sqlite3") as db:
        db.execute("DROP TRIGGER refuse_claims")
    turn_until([executor], lambda: _finished(world, request["run_id"]), "the run succeeded")
    executor.disconnect()
    assert world.executed[request["run_id"]] == 1
    assert world.committed(executor, partition) == offset + 1
    assert _metric(executor, "kairos_executor_duplicates_suppressed_total") == 0


def test_a_crash_between_claim_and_commit_redelivers_the_run_and_it_runs_once(
    world: ExecutorWorld,
) -> None:
    first, clients = world.executor("e1")
    first.connect()
    request = world.request("pay")
    partition, offset = world.publish(request)[0]
    group = first.settings.group(world.settings)

    def crash() -> None:
        # The claim is durable; the executor dies before its commit reaches the group.
        member = clients.members[0].membership
        world.kafka.leave(group, member.member_id, lost=True)

    world.kafka.before_next("commit", crash)
    first.turn()
    assert world.committed(first, partition) is None
    first.disconnect()  # what is left of it: its commit is refused, it is out of the group
    assert world.committed(first, partition) is None
    second, _ = world.executor("e2")
    second.connect()
    turn_until(
        [second],
        lambda: _metric(second, "kairos_executor_duplicates_suppressed_total") == 1,
        "the record redelivered to the second executor, as a duplicate",
    )
    turn_until([second], lambda: _finished(world, request["run_id"]), "the run succeeded")
    second.disconnect()
    assert world.executed[request["run_id"]] == 1
    assert world.steps(request["run_id"]) == ["started", "succeeded"]
    assert world.committed(second, partition) == offset + 1


def test_a_bad_record_is_dead_lettered_once_and_its_offset_passes(world: ExecutorWorld) -> None:
    executor, _ = world.executor()
    executor.connect()
    # The first dead letter is not delivered: nothing is marked, the batch is consumed again.
    # (A batch's dead letters are published at least once: with two bad records in it, the
    # one delivered would go again.)
    world.kafka.fail_delivery(
        world.topic(TopicRole.DEAD_LETTERS), KafkaError(KafkaError._MSG_TIMED_OUT)
    )
    [(bad_partition, bad_offset)] = world.publish_raw((b"junk", b"not a RunRequested"))
    request = world.request("pay")
    world.publish(request)
    turn_until([executor], lambda: _finished(world, request["run_id"]), "the good run ran")
    turn_until(
        [executor],
        lambda: world.committed(executor, bad_partition) == bad_offset + 1,
        "the bad record's offset committed",
    )
    executor.disconnect()
    again, _ = world.executor("e2")
    again.connect()
    for _ in range(5):
        again.turn()
    again.disconnect()
    letters = world.dead_letters()
    assert [(d["source_partition"], d["source_offset"]) for d in letters] == [
        (bad_partition, bad_offset)
    ]
    assert letters[0]["value"] == b"not a RunRequested"
    assert world.executed[request["run_id"]] == 1


def test_a_revoked_partitions_marks_are_committed_before_it_goes(world: ExecutorWorld) -> None:
    # No commits on the interval: only the revocation commits.
    first, first_clients = world.executor("e1", offset_commit_interval=timedelta(hours=1))
    first.connect()
    requests = [world.request(f"s{n}") for n in range(40)]
    written = dict(world.publish(*requests))  # partition -> its last offset
    turn_until([first], lambda: _finished(world, *(r["run_id"] for r in requests)), "every run ran")
    assert all(world.committed(first, p) is None for p in written)
    second, _ = world.executor("e2", offset_commit_interval=timedelta(hours=1))
    second.connect()  # joins: the next consume of the first revokes what moves to the second
    first.turn()
    kept = {partition for _, partition in first_clients.members[0].positions}
    moved = set(written) - kept
    assert kept and moved
    for partition in moved:
        assert world.committed(first, partition) == written[partition] + 1
    for partition in kept & set(written):
        assert world.committed(first, partition) is None, "a kept partition committed early"
    for _ in range(5):
        second.turn()
    assert _metric(second, "kairos_executor_duplicates_suppressed_total") == 0
    second.disconnect()
    first.disconnect()
    assert set(world.executed.values()) == {1}


def test_a_failed_assignment_check_is_raised_after_consume_and_nothing_is_admitted(
    world: ExecutorWorld,
) -> None:
    executor, clients = world.executor()
    refusal = SeparateStoresError("executors", "sqlite", "store-1", "e0@dedupe-store-2")
    clients.fleet.failures.append(refusal)
    request = world.request("pay")
    partition, _ = world.publish(request)[0]
    executor.connect()
    with pytest.raises(SeparateStoresError) as raised:
        executor.turn()
    assert raised.value is refusal
    executor.disconnect()
    assert clients.fleet.checks == 1
    assert _rows(world, "kairos_runs") == 0, "a record of the refused assignment was admitted"
    assert world.committed(executor, partition) is None


def test_run_events_are_published_from_the_outbox_once_delivered(world: ExecutorWorld) -> None:
    executor, _ = world.executor()
    executor.connect()
    request = world.request("pay")
    # The broker times the first run event out: it stays in the outbox and goes next turn.
    world.kafka.fail_delivery(
        world.topic(TopicRole.RUN_EVENTS), KafkaError(KafkaError._MSG_TIMED_OUT)
    )
    world.publish(request)
    turn_until([executor], lambda: _finished(world, request["run_id"]), "the run succeeded")
    executor.disconnect()
    assert world.steps(request["run_id"]) == ["started", "succeeded"]
    assert world.kafka.refused_delivery(world.topic(TopicRole.RUN_EVENTS)) is None
    assert _rows(world, "kairos_outbox") == 0
    assert world.executed[request["run_id"]] == 1
