"""Runs of a pool that no live executor serves: counted and warned about, never dead-lettered.

An executor passes over a run of a pool it does not serve, for the executors that do. If none
does (a typo in a schedule's `pool`, or nobody started the gpu executors yet) the run waits for
ever, and nothing would say so: the executors that pass it over cannot tell that case from a
pool whose executors are restarting. So each executor advertises its pools in its Kafka client
id, beside its dedupe store (`fleet`), and the executors of the default pool, when they pass over
a run of a pool, look at the live members of the consumer groups the broker lets them describe,
keeping those assigned partitions of this deployment's runs topic (cached for `max_age`, 30 s):
a pool that no member advertises is counted in
`kairos_executor_runs_unserved_total{pool}` and logged with the command that starts an executor
for it. The run itself is left on the topic, as every passed-over run is: the pool's executors,
once started, take it from their group's offsets.

What is not known is never counted: a broker that did not answer, or an executor that
advertises no pools (an older one, during a rolling upgrade), makes the whole survey unknown
until the next one. A group the broker does not let this executor describe (an ACL) is not seen:
its pools count as unserved here, in the metric and the log only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import Counter

logger = logging.getLogger(__name__)

_POOLS_TAG = "@pools-"
_POOLS_SEPARATOR = "+"
"""Not a character of pool names (`kairos.core.pools`), so a list of them splits back."""
_LIVE = frozenset(
    {
        ConsumerGroupState.STABLE,
        ConsumerGroupState.PREPARING_REBALANCING,
        ConsumerGroupState.COMPLETING_REBALANCING,
    }
)
_ADMIN_TIMEOUT_S = 10.0

Survey = Callable[[], frozenset[str] | None]
"""The pools live executors advertise, or `None` when that cannot be told."""


def _in_background(survey: Callable[[], None]) -> None:
    # A survey asks the broker twice; admission must not wait for it.
    threading.Thread(target=survey, name="pool-watch", daemon=True).start()


def pools_tagged(instance: str, pools: Iterable[str]) -> str:
    """`instance` with the pools it serves, as it goes into its client id (before the store)."""
    return f"{instance}{_POOLS_TAG}{_POOLS_SEPARATOR.join(sorted(pools))}"


def advertised_pools(client_id: str) -> frozenset[str] | None:
    """The pools an executor's client id advertises, or `None` if it advertises none."""
    _, tag, rest = client_id.rpartition(_POOLS_TAG)
    # The pools end where the store's tag begins: no pool name holds an "@".
    listed = rest.partition("@")[0]
    return frozenset(listed.split(_POOLS_SEPARATOR)) if tag else None


def served_pools(admin: AdminClient, runs_topic: str) -> frozenset[str] | None:
    """Every pool advertised by a live consumer of `runs_topic` (this deployment's executors,
    whatever their group) in the groups the broker lets this executor describe."""
    try:
        listed = admin.list_consumer_groups(request_timeout=_ADMIN_TIMEOUT_S).result()
        live = [g.group_id for g in listed.valid if g.state in _LIVE]
        if not live:
            return frozenset()
        described = admin.describe_consumer_groups(live, request_timeout=_ADMIN_TIMEOUT_S)
        members = [m for f in described.values() for m in f.result().members]
    except KafkaException as failure:
        logger.info("served pools not surveyed: %s", failure)
        return None
    pools: set[str] = set()
    for member in members:
        assigned = member.assignment.topic_partitions if member.assignment else []
        if not any(p.topic == runs_topic for p in assigned):
            continue  # another deployment's executor, or not an executor
        advertised = advertised_pools(member.client_id)
        if advertised is None:
            return None
        pools |= advertised
    return frozenset(pools)


class PoolWatch:
    """Counts the runs passed over for a pool no live executor advertises (module docstring)."""

    def __init__(
        self,
        survey: Survey,
        unserved: Counter,
        *,
        max_age_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Callable[[], None]], None] = _in_background,
    ) -> None:
        self._survey = survey
        self._unserved = unserved
        self._max_age_s = max_age_s
        self._clock = clock
        self._spawn = spawn
        self._lock = threading.Lock()
        self._served: frozenset[str] | None = None
        self._surveyed_at: float | None = None
        self._surveying = False
        self._warned: dict[str, float] = {}

    def passed_over(self, pool: str) -> None:
        """A run of `pool` was passed over for its pool; never blocks on the broker."""
        now = self._clock()
        with self._lock:
            stale = self._surveyed_at is None or now - self._surveyed_at >= self._max_age_s
            start = stale and not self._surveying
            self._surveying |= start
        if start:
            self._spawn(self._resurvey)
        served = self._served  # the latest survey's: the one just started may have ended
        if served is None or pool in served:
            return
        self._unserved.labels(pool).inc()
        if now - self._warned.get(pool, -self._max_age_s) >= self._max_age_s:
            self._warned[pool] = now
            logger.warning(
                "runs of pool %s are passed over and no live executor serves that pool: they "
                "wait until one does. Start one: kairos executor --pool %s --kinds KINDS "
                "--group-id GROUP-OF-POOL --instance NAME --state-dir DIR (or fix the "
                "schedules' pool)",
                pool,
                pool,
            )

    def _resurvey(self) -> None:
        served = self._survey()
        with self._lock:
            self._served, self._surveyed_at = served, self._clock()
            self._surveying = False
