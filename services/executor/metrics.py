"""The executor's Prometheus metrics, in a registry of its own so that tests can read them."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kairos.core.concurrency import GroupStatus
from kairos.services.build import register_build_info

_LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


class ExecutorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        register_build_info(r)
        self.admitted = Counter(
            "kairos_executor_runs_admitted",
            "Deliveries of runs by what the dedupe store made of them (ready, queued, skipped, "
            "duplicate).",
            ["admitted"],
            registry=r,
        )
        self.duplicates = Counter(
            "kairos_executor_duplicates_suppressed",
            "Deliveries of a run id already claimed: redeliveries and re-published copies.",
            registry=r,
        )
        self.outcomes = Counter(
            "kairos_executor_runs",
            "Attempts' outcomes: succeeded, retrying, dead_lettered, cancelled, lease_lost.",
            ["outcome"],
            registry=r,
        )
        self.start_lateness = Histogram(
            "kairos_executor_start_lateness_seconds",
            "From a run's due instant (nominal plus jitter) to the start of its first attempt.",
            buckets=_LATENESS_BUCKETS,
            registry=r,
        )
        self.attempt_duration = Histogram(
            "kairos_executor_attempt_duration_seconds",
            "How long one attempt ran, by job kind and result.",
            ["kind", "result"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "kairos_executor_attempts_in_flight", "Attempts running in this process.", registry=r
        )
        self.reaped = Counter(
            "kairos_executor_leases_reaped",
            "Attempts ended because their executor stopped renewing the lease.",
            registry=r,
        )
        self.dead_letters = Counter(
            "kairos_executor_records_dead_lettered",
            "Records of the runs topic that are not runnable requests, by error class.",
            ["error_class"],
            registry=r,
        )
        self._placement(r)
        self._failure_signals(r)
        self._concurrency_groups(r)

    def _placement(self, r: CollectorRegistry) -> None:
        self.passed_over = Counter(
            "kairos_executor_runs_passed_over",
            "Runs of a pool, team, kind or handler this executor does not run, left to others.",
            ["kind"],
            registry=r,
        )
        self.unserved = Counter(
            "kairos_executor_runs_unserved",
            "Runs passed over for a pool no live executor advertises (counted by the default "
            "pool's executors): they wait for an executor of it.",
            ["pool"],
            registry=r,
        )

    def _failure_signals(self, r: CollectorRegistry) -> None:
        self.deadlines_missed = Counter(
            "kairos_executor_deadlines_missed",
            "Runs that missed their schedule's deadline (start_by or finish_by), counted once "
            "per run and deadline across the executors sharing a dedupe store; by team, not "
            "schedule, so that its series stay as few as the teams (`kairos runs late` names "
            "the runs).",
            ["owner", "deadline"],
            registry=r,
        )
        self.store_errors = Counter(
            "kairos_executor_store_errors",
            "Dedupe store calls that failed (retried on the next turn).",
            registry=r,
        )

    def _concurrency_groups(self, r: CollectorRegistry) -> None:
        by_group = ["group"]
        self.group_limit = Gauge(
            "kairos_executor_concurrency_limit",
            "A limited concurrency group's limit (kairos concurrency set), as the store has it.",
            by_group,
            registry=r,
        )
        self.group_running = Gauge(
            "kairos_executor_concurrency_running",
            "Runs of a limited group running now, on every executor sharing the store.",
            by_group,
            registry=r,
        )
        self.group_waiting = Gauge(
            "kairos_executor_concurrency_waiting",
            "Runs of a limited group due and ready but not started: queued behind its limit.",
            by_group,
            registry=r,
        )

    def show_groups(self, statuses: Sequence[GroupStatus]) -> None:
        """The limited groups as the store has them now; a group no longer limited is dropped."""
        gauges = (self.group_limit, self.group_running, self.group_waiting)
        shown = {s.group for s in statuses}
        for gauge in gauges:
            for group in _groups_of(gauge) - shown:
                gauge.remove(group)
        for status in statuses:
            self.group_limit.labels(status.group).set(status.max_running)
            self.group_running.labels(status.group).set(status.running)
            self.group_waiting.labels(status.group).set(status.waiting)


def _groups_of(gauge: Gauge) -> set[str]:
    """The groups `gauge` has a series for."""
    return {sample.labels["group"] for metric in gauge.collect() for sample in metric.samples}
