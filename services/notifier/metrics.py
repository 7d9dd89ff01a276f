"""The notifier's metrics: what it delivered, retried and gave up, by route kind (never by team
or route: their number is the deployment's to grow), and what it holds undelivered."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from kairos.services.build import register_build_info


class NotifierMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        register_build_info(self.registry)
        self.deliveries = Counter(
            "kairos_notifier_deliveries",
            "Tries of a notice on a route, by route kind and result: delivered, retried, "
            "dead_lettered (given up, reported to the team).",
            ["kind", "result"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "kairos_notifier_pending_records",
            "Records read whose notices are not all delivered or dead-lettered yet.",
            registry=self.registry,
        )
