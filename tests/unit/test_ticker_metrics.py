"""The lateness histogram takes many equal observations at once, and reads like Prometheus's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from kairos.services.ticker.metrics import CountedHistogram

BUCKETS = (0.005, 0.01, 0.5, 1, 60)


def test_counted_observations_expose_what_one_at_a_time_observations_would() -> None:
    one_at_a_time, counted = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("lateness_seconds", "doc", buckets=BUCKETS, registry=one_at_a_time)
    histogram = CountedHistogram("lateness_seconds", "doc", BUCKETS, counted)
    # On a bound, just past one, between, beyond the last, and zero.
    for value, count in [(0.005, 3), (0.0051, 2), (0.3, 1), (1.0, 5), (5_000.0, 4), (0.0, 1)]:
        for _ in range(count):
            reference.observe(value)
        histogram.observe(value, count)
    expected = [
        line
        for line in generate_latest(one_at_a_time).decode().splitlines()
        if "_created" not in line
    ]
    assert generate_latest(counted).decode().splitlines() == expected
    assert counted.get_sample_value("lateness_seconds_count") == 16
