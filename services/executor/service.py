"""The executor process: admit runs from Kafka into the dedupe store, run what the store hands out.

One loop on one thread; attempts run on a pool of worker threads; a keeper thread renews their
leases. The rooms, in the order a run goes through them:

- `session`: the connected clients (store, group consumer, producers), opened and closed together,
  made by the `clients` factory (`ExecutorClients`: the real ones, or the in-memory fakes of the
  unit tests);
- `rebalance`: what partitions coming and going do to the offsets, its callbacks guarded;
- `turn`: one pass of the loop (consume, admit with `intake`, commit `offsets`, reap, dispatch to
  the `workers`, publish);
- `shutdown`: on SIGTERM (`stop` set), commit offsets and leave the group, let attempts finish
  within the grace period while leases and events keep moving, stop what is left, publish, close.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kairos.core.errors import KairosError
from kairos.core.pools import DEFAULT_POOL, PoolNameError, pool_name
from kairos.services.executor.admission import ServedJobs
from kairos.services.executor.attempts import Clock
from kairos.services.executor.clients import ConfluentExecutorClients, ExecutorClients
from kairos.services.executor.handlers import Handlers
from kairos.services.executor.intake import TurnParts
from kairos.services.executor.metrics import ExecutorMetrics
from kairos.services.executor.offsets import OffsetMarks
from kairos.services.executor.pool_watch import PoolWatch, served_pools
from kairos.services.executor.rebalance import CallbackFailures, ExecutorRebalance
from kairos.services.executor.session import ExecutorSession
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.executor.shell_job import check_runtime_capability
from kairos.services.executor.shutdown import shut_down
from kairos.services.executor.turn import ExecutorTurn
from kairos.services.executor.workers import AttemptWorkers
from kairos.services.probes import LoopHealth, group_readiness, probe_server, stall_limit_s
from kairos.services.stopping import stop_on_signals
from kairos.streams.kafka.acls import DeploymentNames, Role
from kairos.streams.kafka.authorization import RoleAccess
from kairos.streams.kafka.ports import GroupMember
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs, make_codecs

logger = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


class ExecutorConfigError(KairosError):
    """The executor cannot start as configured; `problem` says what to change."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class NotConnectedError(RuntimeError):
    """A turn was asked of an executor between sessions (`connect()` first)."""


@dataclass(frozen=True, slots=True)
class _Connected:
    """What a connected executor runs on, made together by `connect` and ended by `disconnect`."""

    session: ExecutorSession
    workers: AttemptWorkers
    marks: OffsetMarks
    turn: ExecutorTurn


class Executor:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: ExecutorSettings,
        handlers: Handlers | None = None,
        clock: Clock = utc_now,
        codecs: Codecs | None = None,
        *,
        clients: ExecutorClients | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.handlers = handlers or Handlers()
        if "python" in settings.kinds and not self.handlers.names:
            raise ExecutorConfigError(
                "python jobs need handlers: register them with "
                "Handlers and pass them (kairos executor --handlers)"
            )
        if "shell" in settings.kinds:
            # Refused before joining, not run by run: every shell run of those teams would fail.
            check_runtime_capability(settings.runtime_policy)
        self.clock = clock
        self.codecs = codecs or make_codecs()
        self.metrics = ExecutorMetrics()
        self.served = self._served(kafka, real_broker=clients is None)
        names = DeploymentNames.of(kafka, executor_group=settings.group(kafka))
        self._access = RoleAccess(kafka, Role.EXECUTOR, names)
        self._clients = clients or ConfluentExecutorClients(kafka, self._access)
        self._connected: _Connected | None = None
        """The session and what runs on it; none before `connect` and after `disconnect`."""
        self.health = LoopHealth(stall_limit_s(kafka), time.monotonic())
        self._assigned = False
        """Whether the group gave this member its partitions (none, perhaps) since `connect`."""

    def run(self, stop: threading.Event) -> None:
        """Execute runs until `stop` is set; then shut down gracefully (`shutdown`)."""
        s = self.settings
        with probe_server(s.metrics_host, s.metrics_port, self.metrics.registry, self.health):
            self.connect()
            try:
                while not stop.is_set():
                    connected = self._connected is not None
                    self.health.turned(time.monotonic(), group_readiness(connected, self._assigned))
                    self.turn()
            finally:
                self.disconnect()

    def connect(self) -> None:
        """Open the session (the store, the fleet checks, the clients), start the workers and
        join the group."""
        s = self.settings
        session = ExecutorSession.open(self._clients, self.kafka, s, self.codecs)
        try:
            workers = AttemptWorkers(
                session,
                s,
                codec=self.codecs.run_requested,
                handlers=self.handlers,
                metrics=self.metrics,
                clock=self.clock,
            )
        except BaseException:
            session.close()
            raise
        marks = OffsetMarks(session.runs_topic, s.offset_commit_interval)
        turn = self._join(session, workers, marks)
        self._connected = _Connected(session, workers, marks, turn)
        logger.info(
            "executor instance=%s started store=%s kinds=%s handlers=%s pools=%s teams=%s",
            s.instance,
            session.store.name,
            sorted(s.kinds),
            sorted(self.handlers.names),
            sorted(s.pools),
            sorted(s.teams) or "every team's",
        )

    def _served(self, kafka: KafkaSettings, *, real_broker: bool) -> ServedJobs:
        """What this executor takes; the executors of the default pool watch for runs of pools
        nobody serves (`pool_watch`: a real broker only, the fakes have no groups to describe)."""
        s = self.settings
        for pool in s.pools:
            try:
                pool_name(pool)
            except PoolNameError as error:
                raise ExecutorConfigError(f"pool: {error}") from None
        for name in sorted(self.handlers.names):
            if self.handlers.callers(name) == frozenset():
                logger.warning(
                    "handler %s is registered without teams: only runs of schedules without an "
                    "owner may call it (register it with teams=(...) or teams=ANY_TEAM)",
                    name,
                )
        served = ServedJobs(s.kinds, self.handlers, s.pools, s.teams)
        if DEFAULT_POOL not in s.pools or not real_broker:
            return served
        # Notices (level 6) off: the admin client's closing would log them as noise.
        admin = AdminClient(kafka.consumer_config(log_level=5))
        runs_topic = kafka.layout.name(TopicRole.RUNS)
        watch = PoolWatch(partial(served_pools, admin, runs_topic), self.metrics.unserved)
        return replace(served, passed_over_pool=watch.passed_over)

    def turn(self) -> None:
        """One pass of the loop (`turn.ExecutorTurn.run_once`)."""
        if self._connected is None:
            raise NotConnectedError("the executor has no session: connect() first")
        self._connected.turn.run_once()

    def disconnect(self) -> None:
        """Shut down gracefully (`shutdown`), if connected."""
        connected, self._connected = self._connected, None
        if connected is not None:
            shut_down(
                connected.session, connected.workers, connected.marks, connected.turn, self.settings
            )

    def _join(
        self, session: ExecutorSession, workers: AttemptWorkers, marks: OffsetMarks
    ) -> ExecutorTurn:
        """Subscribe with guarded rebalance callbacks; the turn raises what they kept."""
        failures = CallbackFailures(self.settings.instance)
        rebalance = ExecutorRebalance(session.guard, marks, self.settings.instance)
        self._assigned = False

        def on_assign(consumer: GroupMember, partitions: list[TopicPartition]) -> None:
            rebalance.on_assign(consumer, partitions)
            # librdkafka serves the first assignment even when it is empty (a standby).
            self._assigned = True

        session.join(
            on_assign=failures.guarded(on_assign),
            on_revoke=failures.guarded(rebalance.on_revoke),
            on_lost=failures.guarded(rebalance.on_lost),
        )
        parts = TurnParts(
            session=session,
            marks=marks,
            served=self.served,
            codec=self.codecs.run_requested,
            settings=self.settings,
            metrics=self.metrics,
            access=self._access,
            clock=self.clock,
        )
        return ExecutorTurn(parts, workers, failures)


def run_executor(
    kafka: KafkaSettings, settings: ExecutorSettings, handlers: Handlers | None = None
) -> None:
    """Run an executor in this process until SIGTERM or Ctrl-C: a team's own executor.

    Call it from the main thread of a program that registered its `python` handlers.
    """
    executor = Executor(kafka, settings, handlers)
    stop = stop_on_signals(logger, "stopping; running attempts may finish in the grace period")
    executor.run(stop)
