"""The ticker's promise under real failures: real processes, real signals, the real broker.

Every occurrence is committed exactly once to the runs topic (as a read_committed consumer sees
it), late by at most the failover time, never lost.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually, sleep_until, unique_name
from tests.kafka_helpers import read_topic, wait_for_stable_group
from tests.processes import ServiceProcess, start_ticker

CODECS = make_codecs()
SESSION_TIMEOUT_S = 3


def publish_every(settings: KafkaSettings, count: int, period_s: int, start: datetime) -> list[str]:
    schedules = [
        Schedule(id=f"job-{n:05d}", every=timedelta(seconds=period_s), start_at=start)
        for n in range(count)
    ]
    with SchedulesClient(settings, changed_by="failover-test") as client:
        client.upsert_all(schedules)
    return [s.id for s in schedules]


def committed_runs(settings: KafkaSettings) -> list[dict[str, Any]]:
    topic = settings.layout.name(TopicRole.RUNS)
    return [
        value
        for _, value in read_topic(
            settings.bootstrap_servers, topic, CODECS.run_requested.decode, timeout_s=60
        )
    ]


def expected_run_ids(ids: list[str], start: datetime, period_s: int, through: datetime) -> set[str]:
    nominals = []
    nominal = start
    while nominal <= through:
        nominals.append(nominal)
        nominal += timedelta(seconds=period_s)
    return {f"{i}@{n:%Y-%m-%dT%H:%M:%SZ}" for i in ids for n in nominals}


def wait_until_all_fired(
    settings: KafkaSettings, expected: set[str], timeout_s: float, message: str
) -> None:
    eventually(
        lambda: expected <= {r["run_id"] for r in committed_runs(settings)},
        timeout_s=timeout_s,
        interval_s=2,
        message=message,
    )


def assert_each_once(runs: list[dict[str, Any]], expected: set[str]) -> None:
    counts = Counter(str(r["run_id"]) for r in runs)
    duplicates = {run_id: n for run_id, n in counts.items() if n > 1}
    assert not duplicates, (
        f"{len(duplicates)} run ids committed more than once, e.g. {list(duplicates)[:5]}"
    )
    missing = expected - counts.keys()
    assert not missing, f"{len(missing)} occurrences lost, e.g. {sorted(missing)[:5]}"


def test_sigkill_of_a_ticker_moves_its_partitions_and_loses_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    period_s = 5
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8)
    ids = publish_every(kafka_settings, count=2000, period_s=period_s, start=start)
    first = start_ticker(kafka_settings, "a", tmp_path / "a", tmp_path)
    second = start_ticker(kafka_settings, "b", tmp_path / "b", tmp_path)
    try:
        first.wait_for_log("handover event=assigned")
        second.wait_for_log("handover event=assigned")
        sleep_until(start + timedelta(seconds=12))
        first.kill()
        killed_at = datetime.now(UTC)
        through = killed_at + timedelta(seconds=20)
        sleep_until(through + timedelta(seconds=2))
        expected = expected_run_ids(ids, start, period_s, through)
        wait_until_all_fired(
            kafka_settings, expected, 60, "occurrences up to 20s after the kill did not all fire"
        )
    finally:
        assert second.stop() == 0, second.log()[-3000:]
    runs = committed_runs(kafka_settings)
    assert_each_once(runs, expected)
    # The survivor took over: some runs due after the kill were fired by it, late by at most the
    # session timeout plus the restore, with a margin for this 2-core machine.
    after_kill = [r for r in runs if r["due_at"] > killed_at]
    assert {r["ticker_instance"] for r in after_kill} == {"b"}
    worst_s = max(r["lateness_ms"] for r in after_kill) / 1000
    assert worst_s <= SESSION_TIMEOUT_S + 7, f"worst lateness after the kill {worst_s}s"


def _stop_inside_a_transaction(process: ServiceProcess, timeout_s: float) -> bool:
    """SIGSTOP `process` while a large firing transaction is open; True if caught inside one.

    The ticker logs (at DEBUG) when a transaction opens and when it commits; a herd's
    transaction takes long enough for the log to be seen before its commit.
    """
    deadline = time.monotonic() + timeout_s
    seen = process.log().count("transaction open")
    while time.monotonic() < deadline:
        log = process.log()
        opened = [line for line in log.splitlines() if "transaction open" in line]
        if len(opened) > seen and int(opened[-1].split("runs=")[1].split()[0]) >= 1000:
            process.signal(signal.SIGSTOP)
            log = process.log()
            return log.count("transaction open") > log.count("transaction committed")
        seen = len(opened)
        time.sleep(0.005)
    raise AssertionError("no large transaction opened")


def test_a_paused_ticker_cannot_commit_after_losing_its_partitions(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    period_s = 20
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=15)
    ids = publish_every(kafka_settings, count=20_000, period_s=period_s, start=start)
    paused = start_ticker(kafka_settings, "p", tmp_path / "p", tmp_path, log_level="DEBUG")
    survivor = start_ticker(kafka_settings, "s", tmp_path / "s", tmp_path)
    try:
        paused.wait_for_log("handover event=assigned")
        survivor.wait_for_log("handover event=assigned")
        # Pause the ticker in the middle of committing a herd, past its session timeout and
        # its transaction timeout, so the group hands its partitions to the survivor.
        for _ in range(3):
            if _stop_inside_a_transaction(paused, timeout_s=period_s + 15):
                break
            paused.signal(signal.SIGCONT)
        else:
            raise AssertionError("never caught the ticker inside a transaction")
        stopped_log = paused.log()
        sleep_until(datetime.now(UTC) + timedelta(seconds=SESSION_TIMEOUT_S * 5))
        paused.signal(signal.SIGCONT)
        through = datetime.now(UTC) + timedelta(seconds=period_s)
        sleep_until(through + timedelta(seconds=2))
        expected = expected_run_ids(ids, start, period_s, through)
        wait_until_all_fired(
            kafka_settings, expected, 90, "occurrences after the pause did not all fire"
        )
    finally:
        paused.signal(signal.SIGCONT)
        assert survivor.stop() == 0, survivor.log()[-3000:]
        paused.stop()
    assert_each_once(committed_runs(kafka_settings), expected)
    # The transaction the ticker was paused in was refused when it woke up.
    woke_up = paused.log()[len(stopped_log) :]
    assert "transaction aborted" in woke_up or "fenced" in woke_up, woke_up[-3000:]


def publish_ticks(settings: KafkaSettings, count: int, start: datetime) -> list[str]:
    """`count` schedules firing every second from `start`; their ids."""
    ticks = [
        Schedule(id=f"tick-{n:02d}", every=timedelta(seconds=1), start_at=start)
        for n in range(count)
    ]
    with SchedulesClient(settings, changed_by="failover-test") as client:
        client.upsert_all(ticks)
    return [t.id for t in ticks]


def a_dying_tickers_producer(settings: KafkaSettings) -> Producer:
    """A transactional producer of its own whose transactions the broker aborts after 10 s."""
    return Producer(
        settings.client_config(
            **{"transactional.id": unique_name("dying-ticker"), "transaction.timeout.ms": 10_000}
        )
    )


def leave_offsets_pending(dying: Producer, settings: KafkaSettings, partitions: set[int]) -> None:
    """Send offsets of the schedules `partitions` in a transaction of the tickers' group, as a
    ticker does before it commits, and never commit it."""
    dying.init_transactions(30)
    dying.begin_transaction()
    tickers = settings.deployment_id(TICKER_GROUP)
    outsider = Consumer(settings.consumer_config(**{"group.id": tickers}))
    schedules = settings.layout.name(TopicRole.SCHEDULES)
    dying.send_offsets_to_transaction(
        [TopicPartition(schedules, p, 0) for p in sorted(partitions)],
        outsider.consumer_group_metadata(),
        30,
    )
    outsider.close()


def settled_after_s(survivor: ServiceProcess) -> dict[int, float]:
    """Partition → seconds the survivor waited before it could take that partition up."""
    return {
        int(line.split(" partition=")[1].split()[0]): float(
            line.split("settled_after=")[1].split()[0]
        )
        for line in survivor.log().splitlines()
        if "handover event=assigned" in line
    }


def assert_own_partitions_fired_on_time_meanwhile(
    runs: list[dict[str, Any]], settings: KafkaSettings, own: set[int], killed_at: datetime
) -> None:
    """The survivor's own ticks due while it waited for the pending transaction were on time."""
    partitions = settings.schedules_partitions
    meanwhile = [
        r
        for r in runs
        if partition_for(r["schedule_id"], partitions) in own
        and killed_at + timedelta(seconds=4) <= r["due_at"] <= killed_at + timedelta(seconds=9)
    ]
    assert meanwhile, "none of the survivor's own ticks was due while it waited"
    worst_ms = max(r["lateness_ms"] for r in meanwhile)
    assert worst_ms <= 2000, f"the survivor's own partitions fired {worst_ms} ms late meanwhile"


def test_a_survivor_keeps_firing_while_partitions_it_took_over_wait_for_a_pending_transaction(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A ticker killed between sending its transaction's offsets and committing leaves them
    pending until the broker aborts the transaction (its timeout, 10 s), and its partitions
    cannot be taken over before. The survivor waits for them without holding up the partitions
    it owns. A transactional producer of this test stops at exactly that point for the killed
    ticker: its offsets stay pending on the killed ticker's partitions."""
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    ids = publish_ticks(kafka_settings, 40, start)
    killed = start_ticker(kafka_settings, "k", tmp_path / "k", tmp_path)
    survivor = start_ticker(kafka_settings, "s", tmp_path / "s", tmp_path)
    dying = a_dying_tickers_producer(kafka_settings)
    try:
        killed.wait_for_log("handover event=assigned")
        survivor.wait_for_log("handover event=assigned")
        tickers = kafka_settings.deployment_id(TICKER_GROUP)
        owners = wait_for_stable_group(kafka_settings.bootstrap_servers, tickers, members=2)
        leave_offsets_pending(dying, kafka_settings, owners["k"])
        killed.kill()
        killed_at = datetime.now(UTC)
        # The survivor is handed the partitions after the session timeout; they settle when the
        # broker aborts the pending transaction, 10 s after it began.
        eventually(
            lambda: survivor.log().count("settled_after=") >= 2 + len(owners["k"]),
            timeout_s=60,
            interval_s=0.5,
            message="the killed ticker's partitions were not taken over",
        )
        sleep_until(killed_at + timedelta(seconds=14))
    finally:
        with contextlib.suppress(KafkaException):
            # Long aborted by the broker by now (its timeout), unless the test failed early.
            dying.abort_transaction(10)
        assert survivor.stop() == 0, survivor.log()[-3000:]
    settled = settled_after_s(survivor)
    assert all(settled[p] >= 3 for p in owners["k"]), f"settled after {settled}"
    runs = committed_runs(kafka_settings)
    through = killed_at + timedelta(seconds=12)
    assert_each_once(runs, expected_run_ids(ids, start, 1, through))
    assert_own_partitions_fired_on_time_meanwhile(runs, kafka_settings, owners["s"], killed_at)


@pytest.mark.parametrize("policy", ["all"])
def test_whole_group_down_then_restarted_fires_missed_occurrences_once(
    kafka_settings: KafkaSettings, tmp_path: Path, policy: str
) -> None:
    period_s = 2
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
    ids = publish_every(kafka_settings, count=200, period_s=period_s, start=start)
    ticker = start_ticker(kafka_settings, "solo", tmp_path / "solo", tmp_path)
    ticker.wait_for_log("handover event=assigned")
    sleep_until(start + timedelta(seconds=4))
    assert ticker.stop() == 0
    down_from = datetime.now(UTC)
    sleep_until(down_from + timedelta(seconds=10))
    (tmp_path / "restart").mkdir()
    restarted = start_ticker(kafka_settings, "solo", tmp_path / "solo", tmp_path / "restart")
    try:
        restarted.wait_for_log("restore=warm")
        # The local store was intact: restore replayed nothing of the changelog (which holds a
        # record per schedule), not the whole of it.
        restores = [
            line for line in restarted.log().splitlines() if "handover event=assigned" in line
        ]
        assert all("restore=warm records=0 " in line for line in restores), restores
        through = datetime.now(UTC) + timedelta(seconds=4)
        sleep_until(through + timedelta(seconds=2))
        expected = expected_run_ids(ids, start, period_s, through)
        wait_until_all_fired(
            kafka_settings, expected, 60, "missed occurrences did not all fire after the restart"
        )
    finally:
        assert restarted.stop() == 0
    runs = committed_runs(kafka_settings)
    assert_each_once(runs, expected)
    missed = [
        r
        for r in runs
        if down_from + timedelta(seconds=1) < r["due_at"] < down_from + timedelta(seconds=9)
    ]
    assert missed, "no occurrence fell in the downtime"
    assert all(r["lateness_ms"] >= 1000 for r in missed), "missed occurrences fired late, as owed"
