"""A restore reaches the committed state: whatever the group's offsets and open transactions.

Real ticker processes, real signals, the real broker. Each test fails on a ticker whose memory of
the schedules topic is only the group's committed offset, or whose restore stops at the
changelog's last stable offset.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from tests.broker.test_ticker_failover import committed_runs
from tests.helpers import eventually, just_after_a_second, sleep_until, unique_name
from tests.processes import ServiceProcess, start_ticker


def _every_second(schedule_id: str, start: datetime) -> Schedule:
    return Schedule(id=schedule_id, every=timedelta(seconds=1), start_at=start)


def _duplicates(runs: list[dict[str, Any]]) -> dict[str, int]:
    counts = Counter(str(r["run_id"]) for r in runs)
    return {run_id: n for run_id, n in counts.items() if n > 1}


def _fired(settings: KafkaSettings, schedule_id: str) -> list[datetime]:
    return sorted(
        r["nominal_at"] for r in committed_runs(settings) if r["schedule_id"] == schedule_id
    )


def _wait_fired_after(settings: KafkaSettings, schedule_id: str, instant: datetime) -> None:
    eventually(
        lambda: any(n > instant for n in _fired(settings, schedule_id)),
        timeout_s=60,
        interval_s=0.5,
        message=f"{schedule_id} did not fire after {instant.isoformat()}",
    )


def _ids_on_partition(partition: int, partitions: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    n = 0
    while len(found) < count:
        candidate = f"{prefix}-{n}"
        if partition_for(candidate, partitions) == partition:
            found.append(candidate)
        n += 1
    return found


def test_a_new_group_id_or_a_fresh_host_never_applies_the_history_again(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A ticker under a new group id (no committed offsets) resumes where its state applied the
    schedules topic, warm from its store and cold from the changelog alike."""
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    with SchedulesClient(kafka_settings, changed_by="restore-test") as client:
        client.upsert_all([_every_second("gone", start), _every_second("kept", start)])
        first = start_ticker(
            kafka_settings, "t1", tmp_path / "t1", tmp_path, group_id=unique_name("g1")
        )
        try:
            first.wait_for_log("handover event=assigned")
            _wait_fired_after(kafka_settings, "gone", start + timedelta(seconds=2))
            deleted_at = just_after_a_second()
            client.delete("gone")
            _wait_fired_after(kafka_settings, "kept", deleted_at + timedelta(seconds=2))
        finally:
            assert first.stop() == 0, first.log()[-3000:]
    fired_by_first = len(committed_runs(kafka_settings))
    gone_by_first = _fired(kafka_settings, "gone")

    # The same store under a group that never committed anything; then a fresh host.
    logs = []
    for name, state_dir in (("warm", tmp_path / "t1"), ("cold", tmp_path / "fresh")):
        (tmp_path / name).mkdir()
        again = start_ticker(
            kafka_settings, "t1", state_dir, tmp_path / name, group_id=unique_name("g2")
        )
        try:
            again.wait_for_log("handover event=assigned")
            _wait_fired_after(kafka_settings, "kept", datetime.now(UTC) + timedelta(seconds=2))
        finally:
            assert again.stop() == 0, again.log()[-3000:]
        logs.append(again.log())

    runs = committed_runs(kafka_settings)
    assert len(runs) > fired_by_first
    assert not _duplicates(runs), f"run ids fired twice: {sorted(_duplicates(runs))[:5]}"
    assert _fired(kafka_settings, "gone") == gone_by_first, "the history was applied again"
    late_gone = [n for n in gone_by_first if n > deleted_at]
    assert not late_gone, f"a deleted schedule fired after its delete: {late_gone}"
    assert all("already applied the schedules topic" in log for log in logs)


def _hold_changelog_transaction(settings: KafkaSettings, partition: int) -> Producer:
    """Open a transaction on a changelog partition and leave it open (as a paused owner would)."""
    producer = Producer(
        settings.client_config(
            **{"transactional.id": unique_name("holder"), "transaction.timeout.ms": 300_000}
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    changelog = settings.layout.name(TopicRole.CHANGELOG)
    producer.produce(changelog, key=b"held-open", value=b"never committed", partition=partition)
    assert producer.flush(30) == 0
    return producer


def _restart(settings: KafkaSettings, state_dir: Path, log_dir: Path, group: str) -> ServiceProcess:
    log_dir.mkdir()
    return start_ticker(settings, "owner", state_dir, log_dir, group_id=group)


def test_an_open_transaction_on_the_changelog_never_makes_a_restore_stop_short(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """While another producer holds a transaction open on a changelog partition, the owner keeps
    firing; it is SIGKILLed and restarted warm, then again on a fresh host: no run id twice,
    and an edit applied meanwhile (a pause) is not lost."""
    partitions = kafka_settings.schedules_partitions
    ticking, paused = _ids_on_partition(0, partitions, 2, "held")
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    group = unique_name("owners")
    with SchedulesClient(kafka_settings, changed_by="restore-test") as client:
        client.upsert_all([_every_second(ticking, start), _every_second(paused, start)])
        owner = start_ticker(kafka_settings, "owner", tmp_path / "owner", tmp_path, group_id=group)
        owner.wait_for_log("handover event=assigned")
        _wait_fired_after(kafka_settings, ticking, start + timedelta(seconds=1))
        holder = _hold_changelog_transaction(kafka_settings, partition=0)
        held = True
        try:
            client.pause(paused)
            paused_at = datetime.now(UTC)
            # Fires and the pause are committed behind the held transaction.
            _wait_fired_after(kafka_settings, ticking, paused_at + timedelta(seconds=3))
            owner.kill()

            warm = _restart(kafka_settings, tmp_path / "owner", tmp_path / "warm", group)
            try:
                warm.wait_for_log("handover event=assigned")
                _wait_fired_after(kafka_settings, ticking, datetime.now(UTC) + timedelta(seconds=2))
            finally:
                warm.kill()

            cold = _restart(kafka_settings, tmp_path / "fresh", tmp_path / "cold", group)
            try:
                cold.wait_for_log("holds it back")
                sleep_until(datetime.now(UTC) + timedelta(seconds=2))
                holder.abort_transaction(30)
                held = False
                cold.wait_for_log("handover event=assigned")
                _wait_fired_after(kafka_settings, ticking, datetime.now(UTC) + timedelta(seconds=2))
            finally:
                assert cold.stop() == 0, cold.log()[-3000:]
        finally:
            if held:
                holder.abort_transaction(30)

    runs = committed_runs(kafka_settings)
    assert not _duplicates(runs), f"run ids fired twice: {sorted(_duplicates(runs))[:5]}"
    after_pause = [
        n for n in _fired(kafka_settings, paused) if n > paused_at + timedelta(seconds=1)
    ]
    assert not after_pause, f"the pause was lost in a restore: {paused} fired at {after_pause}"
    ticked = _fired(kafka_settings, ticking)
    gaps = [b - a for a, b in pairwise(ticked) if b - a != timedelta(seconds=1)]
    assert not gaps, f"occurrences of {ticking} lost: gaps {gaps[:5]}"
