"""The ticker's Prometheus metrics, in a registry of its own so that tests can read them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class TickerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.lateness = Histogram(
            "kairos_ticker_fire_lateness_seconds",
            "From an occurrence's due instant to the commit of its RunRequested.",
            buckets=_LATENESS_BUCKETS,
            registry=r,
        )
        self.fires = Counter("kairos_ticker_fires", "RunRequested records committed.", registry=r)
        self.skips = Counter(
            "kairos_ticker_misfire_skips", "Occurrences skipped by misfire policy.", registry=r
        )
        self.owned_partitions = Gauge(
            "kairos_ticker_owned_partitions", "Schedules partitions this ticker owns.", registry=r
        )
        self.schedules_held = Gauge(
            "kairos_ticker_schedules_held", "Schedules in the owned partitions.", registry=r
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

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)
