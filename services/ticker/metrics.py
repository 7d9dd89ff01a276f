"""The ticker's Prometheus metrics, in a registry of its own so that tests can read them."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kairos.services.build import register_build_info

_LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class CountedHistogram(Collector):
    """A histogram that takes many equal observations at once.

    A transaction's runs share a handful of due instants and one commit instant, so their
    lateness takes a handful of values: observing each run alone was 8% of a herd's time.
    """

    def __init__(
        self, name: str, documentation: str, buckets: tuple[float, ...], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = buckets
        self._counts = [0] * (len(buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, value: float, count: int = 1) -> None:
        """`count` observations of `value`."""
        with self._lock:
            self._counts[bisect_left(self._bounds, value)] += count
            self._sum += value * count

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, count in zip((*map(floatToGoString, self._bounds), "+Inf"), counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        yield HistogramMetricFamily(
            self._name, self._documentation, buckets=buckets, sum_value=total
        )


class TickerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        register_build_info(r)
        self.lateness = CountedHistogram(
            "kairos_ticker_fire_lateness_seconds",
            "From an occurrence's due instant to the commit of its RunRequested.",
            _LATENESS_BUCKETS,
            r,
        )
        self.fires = Counter("kairos_ticker_fires", "RunRequested records committed.", registry=r)
        self.decided_ahead = Counter(
            "kairos_ticker_decided_ahead",
            "Occurrences committed as decided ahead in idle time rather than at their due instant.",
            registry=r,
        )
        self.skips = Counter(
            "kairos_ticker_misfire_skips", "Occurrences skipped by misfire policy.", registry=r
        )
        self._add_partition_metrics(r)
        self.commit_seconds = Histogram(
            "kairos_ticker_transaction_commit_seconds",
            "Time to commit one firing transaction.",
            registry=r,
        )
        self.aborts = Counter(
            "kairos_ticker_transaction_aborts", "Transactions aborted.", ["reason"], registry=r
        )
        self.dead_letters = Counter(
            "kairos_ticker_dead_letters", "Schedule events dead-lettered.", registry=r
        )
        self.clock_skew = Gauge(
            "kairos_ticker_clock_skew_seconds",
            "This host's clock against the broker's, from the append times of the last "
            "transaction's changelog records: > 0 ahead, < 0 behind (lower bounds).",
            registry=r,
        )
        self.quarantined = Counter(
            "kairos_ticker_quarantined_schedules",
            "Schedules removed and dead-lettered because they could not be decoded, decided or "
            "encoded.",
            registry=r,
        )

    def _add_partition_metrics(self, r: CollectorRegistry) -> None:
        """What the owned partitions hold, and what restoring them costs."""
        self.owned_partitions = Gauge(
            "kairos_ticker_owned_partitions", "Schedules partitions this ticker owns.", registry=r
        )
        self.schedules_partitions = Gauge(
            "kairos_ticker_schedules_partitions",
            "Partitions of the schedules topic: how many the tickers' group must own between "
            "them (the partition alert compares the owned ones' sum with it).",
            registry=r,
        )
        self.schedules_held = Gauge(
            "kairos_ticker_schedules_held", "Schedules in the owned partitions.", registry=r
        )
        self.schedules_decoded = Gauge(
            "kairos_ticker_schedules_decoded",
            "Schedules held decoded in memory: those due within two minutes (the rest are bytes "
            "in the state store until then).",
            registry=r,
        )
        self.restore_seconds = Histogram(
            "kairos_ticker_restore_seconds",
            "Time to restore one partition's store from the changelog.",
            ["mode"],
            registry=r,
        )
        self.restored_records = Counter(
            "kairos_ticker_restored_records",
            "Changelog records applied while restoring.",
            ["mode"],
            registry=r,
        )
