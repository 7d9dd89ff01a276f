"""A ticker whose clock runs ahead of the broker's never fires early.

The ticker runs in this process on a clock 30 s ahead (injected: libfaketime stretches
librdkafka's condition waits by the offset, so a shifted process cannot be run as a whole),
against the real broker. Every transaction it decides is measured against the broker's append
times on the changelog and aborted, so no run is committed before it is due.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kairos.core.schedule import Schedule
from kairos.services.ticker.service import Ticker
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from tests.broker.test_ticker_failover import committed_runs
from tests.helpers import eventually, unique_name


def _ahead_by_30s() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=30)


def test_a_ticker_on_a_clock_ahead_of_the_brokers_refuses_to_fire_early(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    with SchedulesClient(kafka_settings, changed_by="clock-test") as client:
        client.upsert(Schedule(id="tick", every=timedelta(seconds=1), start_at=start))
    ticker = Ticker(
        kafka_settings,
        TickerSettings(
            instance="ahead",
            state_dir=tmp_path / "ahead",
            group_id=unique_name("clock"),
            session_timeout_ms=3000,
        ),
        clock=_ahead_by_30s,
    )
    registry = ticker.metrics.registry

    def refusals() -> float:
        value = registry.get_sample_value(
            "kairos_ticker_transaction_aborts_total", {"reason": "CLOCK_AHEAD"}
        )
        return value or 0.0

    stop = threading.Event()
    thread = threading.Thread(target=ticker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        eventually(
            lambda: refusals() >= 3,
            timeout_s=90,
            interval_s=0.5,
            message="the ticker on a clock 30 s ahead did not refuse to fire",
        )
        read_at = datetime.now(UTC)
        early = [r["run_id"] for r in committed_runs(kafka_settings) if r["due_at"] > read_at]
        skew_s = registry.get_sample_value("kairos_ticker_clock_skew_seconds")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the ticker did not stop"
    assert not early, f"runs committed before they were due: {early[:5]}"
    assert skew_s is not None and 29 <= skew_s <= 31, f"measured {skew_s}s, the clock is 30 s ahead"
