"""The broker goes away under a running ticker and comes back: occurrences are late, not lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kairos.devinfra.kafka_broker import LocalKafka
from kairos.services.ticker.watchdog import EXIT_STUCK
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import create_topics
from tests.broker.test_ticker_failover import (
    assert_each_once,
    committed_runs,
    expected_run_ids,
    publish_every,
)
from tests.helpers import eventually, sleep_until
from tests.processes import start_ticker


def test_a_broker_outage_delays_fires_and_loses_none(tmp_path: Path) -> None:
    # A broker of this test's own: stopping the session's would break every other test.
    broker = LocalKafka(data_dir=tmp_path / "kafka")
    status, _ = broker.start()
    assert status.bootstrap_servers is not None
    settings = KafkaSettings(
        bootstrap_servers=status.bootstrap_servers, topic_prefix="outage.", schedules_partitions=4
    )
    ticker = None
    try:
        create_topics(AdminClient(settings.consumer_config()), settings.layout)
        period_s = 2
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
        ids = publish_every(settings, count=100, period_s=period_s, start=start)
        ticker = start_ticker(settings, "steady", tmp_path / "state", tmp_path)
        ticker.wait_for_log("handover event=assigned")
        sleep_until(start + timedelta(seconds=5))
        broker.stop()
        down_at = datetime.now(UTC)
        sleep_until(down_at + timedelta(seconds=10))
        restarted, _ = broker.start()
        # The broker comes back where clients knew it.
        assert restarted.bootstrap_servers == settings.bootstrap_servers
        through = datetime.now(UTC) + timedelta(seconds=6)
        sleep_until(through + timedelta(seconds=2))
        expected = expected_run_ids(ids, start, period_s, through)

        def all_fired() -> bool:
            nonlocal ticker
            assert ticker is not None
            # A supervisor's job, done here: librdkafka can hang in a transaction call when the
            # coordinator vanished mid-call, and the ticker then exits with EXIT_STUCK.
            if ticker.process.poll() == EXIT_STUCK:
                ticker = start_ticker(settings, "steady", tmp_path / "state", tmp_path / "again")
            assert ticker.process.poll() is None, ticker.log()[-3000:]
            return expected <= {r["run_id"] for r in committed_runs(settings)}

        (tmp_path / "again").mkdir()
        eventually(
            all_fired,
            timeout_s=150,
            interval_s=2,
            message="occurrences due during the outage did not all fire after it",
        )
        runs = committed_runs(settings)
        assert_each_once(runs, expected)
        during = [r for r in runs if down_at < r["due_at"] < down_at + timedelta(seconds=9)]
        assert during, "no occurrence fell in the outage"
        assert all(r["fired_at"] > down_at + timedelta(seconds=9) for r in during)
    finally:
        if ticker is not None:
            assert ticker.stop(timeout_s=60) == 0, ticker.log()[-3000:]
        broker.stop()
