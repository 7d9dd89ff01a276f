"""The executor process: admit runs from Kafka into the dedupe store, run what the store hands out.

One loop on one thread; attempts run on a pool of worker threads; a keeper thread renews their
leases. Each turn of the loop:

1. consumes a batch of the runs topic (read_committed, in the executors' consumer group);
2. checks each record (`admission`): bad ones are dead-lettered, valid ones claimed in the store
   in one transaction; only then are their offsets marked for commit, so a crash before the
   claim redelivers the record and a crash after it redelivers a duplicate, which is suppressed;
3. commits marked offsets (at most every `offset_commit_interval`);
4. ends attempts whose lease expired (any executor's), so their runs are retried;
5. acquires ready, due runs (new ones, and retries whose backoff has passed) for its free
   workers: retries come from the store, never from Kafka;
6. publishes the outbox's lifecycle events.

SIGTERM (`stop` set): commit offsets and leave the group, let attempts finish within the grace
period while leases and events keep moving, stop what is left, publish, close.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from types import FrameType

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kairos.core.errors import KairosError
from kairos.core.run_id import parse_run_id
from kairos.services.executor.admission import (
    PassedOver,
    Rejected,
    ServedJobs,
    read_request,
)
from kairos.services.executor.attempts import (
    AttemptRunner,
    Clock,
    InFlightAttempts,
    LeaseKeeper,
    ShellJobGuard,
)
from kairos.services.executor.events import EventPublisher, PublishError, dead_letter_record
from kairos.services.executor.failure_pause import FailurePause
from kairos.services.executor.fleet import (
    FleetCheckError,
    SeparateStoresError,
    StoreGuard,
    advertised_client_id,
    check_retention,
)
from kairos.services.executor.handlers import Handlers
from kairos.services.executor.metrics import ExecutorMetrics
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.executor.watchdog import JobWatchdog
from kairos.streams.acls import DeploymentNames, Role
from kairos.streams.authorization import RoleAccess
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import (
    Admitted,
    DedupeStoreError,
    OutboxEvent,
    RunEnd,
    RunRequest,
    SourceRecord,
)
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole

logger = logging.getLogger(__name__)

_BATCH = 500
_REAP_EVERY = timedelta(seconds=1)
_PRUNE_EVERY = timedelta(minutes=10)
_PRUNE_LIMIT = 10_000
_FLUSH_TIMEOUT_S = 30.0
_STOPPED_ATTEMPTS_WAIT_S = 10.0
_LINGERING_MARGIN = timedelta(seconds=2)
"""Beyond a session timeout, how long a dead executor's member may take to leave the group."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class ExecutorConfigError(KairosError):
    """The executor cannot start as configured; `problem` says what to change."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class Executor:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: ExecutorSettings,
        handlers: Handlers | None = None,
        clock: Clock = utc_now,
        codecs: Codecs | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.handlers = handlers or Handlers()
        if "python" in settings.kinds and not self.handlers.names:
            raise ExecutorConfigError(
                "python jobs need handlers: register them with "
                "Handlers and pass them (kairos executor --handlers)"
            )
        self.served = ServedJobs(settings.kinds, self.handlers)
        self.clock = clock
        self.codecs = codecs or make_codecs()
        self.metrics = ExecutorMetrics()
        self.runs_topic = kafka.layout.name(TopicRole.RUNS)
        self.attempts = InFlightAttempts()
        self._marked: dict[int, int] = {}
        """Per partition, the offset after the last record whose claim (or dead letter) is
        durable: safe to commit."""
        self._last_commit = 0.0
        self._next_reap = self._next_prune = datetime.min.replace(tzinfo=UTC)
        self._job_producer: Producer | None = None
        self._job_producer_lock = threading.Lock()
        names = DeploymentNames.of(kafka, executor_group=settings.group(kafka))
        self._access = RoleAccess(kafka, Role.EXECUTOR, names)
        self._refused: SeparateStoresError | FleetCheckError | None = None
        """Set at an assignment that showed a member on another store: stop before admitting."""

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Execute runs until `stop` is set; then shut down gracefully (module docstring)."""
        s = self.settings
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port)
        self.store = open_dedupe_store(s.store_url)
        try:
            self.guard = self._check_fleet()
        except BaseException:
            self.store.close()
            raise
        self.publisher = EventPublisher(self.kafka, self.codecs, s.instance, _FLUSH_TIMEOUT_S)
        self.watchdog = JobWatchdog()
        self.failure_pause = FailurePause(self.kafka, self.store, s.instance)
        shell_jobs = ShellJobGuard(self.watchdog, s.lease)
        self.keeper = LeaseKeeper(self.store, self.attempts, s.lease, self.clock, shell_jobs)
        self.runner = AttemptRunner(
            store=self.store,
            settings=s,
            codec=self.codecs.run_requested,
            handlers=self.handlers,
            metrics=self.metrics,
            attempts=self.attempts,
            job_producer=self._kafka_jobs,
            clock=self.clock,
            shell_jobs=shell_jobs,
            on_dead_letter=self.failure_pause.failed,
        )
        self.pool = ThreadPoolExecutor(s.concurrency, thread_name_prefix="attempt")
        # read_committed: runs of an aborted ticker transaction were never fired.
        client_id = advertised_client_id(s.instance, self.store.store_id)
        self.consumer = Consumer(
            self.kafka.group_member_config(s.group(self.kafka), client_id, s.session_timeout_ms)
        )
        self.consumer.subscribe(
            [self.runs_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self.keeper.start()
        self._last_commit = time.monotonic()
        logger.info(
            "executor instance=%s started store=%s kinds=%s handlers=%s",
            s.instance,
            self.store.name,
            sorted(s.kinds),
            sorted(self.handlers.names),
        )
        try:
            while not stop.is_set():
                self.turn()
        finally:
            self._shutdown()

    def _check_fleet(self) -> StoreGuard:
        """Refuse a store that forgets too soon, or a group on another store (`fleet`)."""
        s = self.settings
        self._access.check()
        # Notices (level 6) off: the admin client's closing would log them as noise.
        admin = AdminClient(self.kafka.consumer_config(log_level=5))
        check_retention(admin, self.runs_topic, s.retention)
        lingering = timedelta(milliseconds=s.session_timeout_ms) + _LINGERING_MARGIN
        guard = StoreGuard(admin, s.group(self.kafka), self.store, lingering)
        guard.check_before_joining()
        return guard

    def _shutdown(self) -> None:
        s = self.settings
        logger.info(
            "executor instance=%s stopping: %d attempts in flight", s.instance, len(self.attempts)
        )
        # 1. Take no more work: commit what was claimed and leave the group, so the partitions
        #    move to the other executors at once.
        self._commit_offsets(force=True)
        self.consumer.close()
        # 2. Let running attempts finish within the grace period, leases and events moving.
        deadline = time.monotonic() + s.shutdown_grace.total_seconds()
        while len(self.attempts) and time.monotonic() < deadline:
            self._publish_events()
            time.sleep(s.poll_interval.total_seconds())
        # 3. Stop what is left: each records a failed attempt, retried by another executor.
        for attempt in self.attempts.snapshot():
            attempt.request_stop("the executor is shutting down and its grace period ended")
        waited_until = time.monotonic() + _STOPPED_ATTEMPTS_WAIT_S
        while len(self.attempts) and time.monotonic() < waited_until:
            time.sleep(0.05)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.keeper.close()
        self.watchdog.close()
        # 4. Publish the events of the last outcomes, then close.
        self._publish_events()
        self.publisher.close()
        self.failure_pause.close()
        if self._job_producer is not None:
            self._job_producer.flush(_FLUSH_TIMEOUT_S)
        self.store.close()
        logger.info("executor instance=%s stopped", s.instance)

    def _kafka_jobs(self) -> Producer:
        """The producer of `kafka` jobs, made on first use and shared by the workers."""
        with self._job_producer_lock:
            if self._job_producer is None:
                self._job_producer = Producer(self.kafka.producer_config(**{"linger.ms": 0}))
            return self._job_producer

    # -- rebalance ---------------------------------------------------------------------------

    def _on_assign(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self.guard.check_assignment()
        except (SeparateStoresError, FleetCheckError) as refused:
            # Raised by the loop before it admits a record of these partitions.
            self._refused = refused
            return
        logger.info(
            "executor instance=%s partitions assigned: %s",
            self.settings.instance,
            sorted(tp.partition for tp in partitions),
        )

    def _on_revoke(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        # Everything consumed from these partitions is claimed: commit it, so the next owner
        # does not redeliver it.
        self._commit_offsets(force=True, only={tp.partition for tp in partitions})
        for tp in partitions:
            self._marked.pop(tp.partition, None)

    def _on_lost(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        # Not ours any more: another owner redelivers from the last commit, and the store
        # suppresses what we already claimed.
        for tp in partitions:
            self._marked.pop(tp.partition, None)

    # -- one turn ----------------------------------------------------------------------------

    def turn(self) -> None:
        """Consume, admit, commit, reap, acquire, publish: one pass of the loop."""
        messages = self.consumer.consume(
            num_messages=_BATCH, timeout=self.settings.poll_interval.total_seconds()
        )
        if self._refused is not None:
            raise self._refused
        if messages:
            self._admit(messages)
        self._commit_offsets()
        now = self.clock()
        try:
            if now >= self._next_reap:
                self._next_reap = now + _REAP_EVERY
                self._reap(now)
            # Before dispatch: a run taken now, past its start deadline, is reported first.
            self._report_missed_deadlines(now)
            self._dispatch(now)
            if now >= self._next_prune:
                self._next_prune = now + _PRUNE_EVERY
                self.store.prune_finished(now - self.settings.retention, _PRUNE_LIMIT)
                self.store.prune_deadlines(_PRUNE_LIMIT)
        except DedupeStoreError as error:
            self.metrics.store_errors.inc()
            logger.error(
                "executor instance=%s store unavailable: %s", self.settings.instance, error
            )
        self._publish_events()
        self.failure_pause.check()

    def _reap(self, now: datetime) -> None:
        reaped = self.store.reap_expired(now, self.settings.instance)
        self.metrics.reaped.inc(len(reaped))
        for run_id, end in reaped:
            if end is RunEnd.DEAD_LETTERED:
                schedule_id, _ = parse_run_id(run_id)
                self.failure_pause.failed(schedule_id, "its executor stopped renewing the lease")

    def _admit(self, messages: list[Message]) -> None:
        now = self.clock()
        records = [m for m in messages if not self._consumer_error(m)]
        try:
            accepted = self._check(records, now)
            self.publisher.flush()  # the dead letters, before their offsets can be committed
            admissions = self.store.admit(accepted, now, self.settings.instance) if accepted else []
            # Before the offsets are marked: a crash in between redelivers, and writes it then.
            self.store.track_deadlines(accepted)
        except (DedupeStoreError, PublishError) as error:
            self._access.raise_if_refused(error, getattr(error, "topic", None))
            # Nothing of this batch is marked: consume it again from its first record.
            self.metrics.store_errors.inc()
            logger.error("executor admission failed, will retry the batch: %s", error)
            firsts: dict[int, int] = {}
            for message in records:
                firsts.setdefault(_partition(message), _offset(message))
            for partition, offset in firsts.items():
                self.consumer.seek(TopicPartition(self.runs_topic, partition, offset))
            time.sleep(self.settings.poll_interval.total_seconds())
            return
        for admission in admissions:
            self.metrics.admitted.labels(admission.admitted.value).inc()
            if admission.admitted is Admitted.DUPLICATE:
                self.metrics.duplicates.inc()
                logger.info(
                    "run=%s duplicate delivery %d suppressed",
                    admission.run_id,
                    admission.deliveries,
                )
        self._marked.update({_partition(m): _offset(m) + 1 for m in records})

    def _consumer_error(self, message: Message) -> bool:
        error = message.error()
        if error is not None:
            self._access.raise_if_refused(error, message.topic())
            logger.warning("executor consumer error: %s", error.str())
        return error is not None

    def _check(self, records: list[Message], now: datetime) -> list[RunRequest]:
        """The runs to claim; bad records are dead-lettered (durable after a flush)."""
        accepted = []
        for message in records:
            source = SourceRecord(self.runs_topic, _partition(message), _offset(message))
            verdict = read_request(
                message.key(), message.value(), source, self.codecs.run_requested, self.served
            )
            if isinstance(verdict, RunRequest):
                accepted.append(verdict)
            elif isinstance(verdict, PassedOver):
                self.metrics.passed_over.labels(verdict.kind).inc()
                logger.debug(
                    "run=%s kind %s not run here: passed over", verdict.run_id, verdict.kind
                )
            else:
                self._dead_letter(message, source, verdict, now)
        return accepted

    def _dead_letter(
        self, message: Message, source: SourceRecord, verdict: Rejected, now: datetime
    ) -> None:
        logger.warning(
            "dead-lettering runs partition=%d offset=%d: %s",
            source.partition,
            source.offset,
            verdict.reason,
        )
        self.metrics.dead_letters.labels(verdict.error_class).inc()
        self.publisher.dead_letter(
            dead_letter_record(
                source,
                message.key(),
                message.value(),
                reason=verdict.reason,
                error_class=verdict.error_class,
                at=now,
                instance=self.settings.instance,
            )
        )

    def _commit_offsets(self, force: bool = False, only: set[int] | None = None) -> None:
        interval = self.settings.offset_commit_interval.total_seconds()
        if not self._marked or (not force and time.monotonic() - self._last_commit < interval):
            return
        offsets = [
            TopicPartition(self.runs_topic, p, o)
            for p, o in self._marked.items()
            if only is None or p in only
        ]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            # Claims are durable; a failed commit only means more suppressed duplicates.
            logger.warning("executor offset commit failed: %s", error.args[0].str())
            return
        self._last_commit = time.monotonic()
        for tp in offsets:
            del self._marked[tp.partition]

    def _report_missed_deadlines(self, now: datetime) -> None:
        for missed in self.store.report_missed_deadlines(now, self.settings.instance):
            owner = self.codecs.run_requested.decode(missed.value)["owner"] or ""
            self.metrics.deadlines_missed.labels(
                owner, missed.schedule_id, missed.deadline.value
            ).inc()
            logger.warning("run=%s %s", missed.run_id, missed.reason)

    def _dispatch(self, now: datetime) -> None:
        free = self.settings.concurrency - len(self.attempts)
        held_until = time.monotonic() + self.settings.lease.total_seconds()
        for lease in self.store.acquire(
            self.settings.instance, self.served.runners, now, self.settings.lease, free
        ):
            attempt = self.attempts.add(lease, held_until)
            logger.info("run=%s attempt=%d started", lease.run_id, lease.attempt)
            self.pool.submit(self.runner.run, attempt)
        self.metrics.in_flight.set(len(self.attempts))

    def _publish_events(self) -> None:
        """Publish the outbox: a full batch means more may wait."""
        try:
            while self.store.publish_events(self._publish_batch, _BATCH) == _BATCH:
                continue
        except (DedupeStoreError, PublishError) as error:
            self._access.raise_if_refused(error, getattr(error, "topic", None))
            logger.error(
                "executor could not publish run events (they stay in the outbox): %s", error
            )

    def _publish_batch(self, events: Sequence[OutboxEvent]) -> None:
        self.publisher.publish_events(events, self.clock())


def _partition(message: Message) -> int:
    partition = message.partition()
    assert partition is not None, "consumed records have a partition"
    return partition


def _offset(message: Message) -> int:
    offset = message.offset()
    assert offset is not None, "consumed records have an offset"
    return offset


def run_executor(
    kafka: KafkaSettings, settings: ExecutorSettings, handlers: Handlers | None = None
) -> None:
    """Run an executor in this process until SIGTERM or Ctrl-C: a team's own executor.

    Call it from the main thread of a program that registered its `python` handlers.
    """
    executor = Executor(kafka, settings, handlers)
    stop = threading.Event()

    def request_stop(signum: int, _: FrameType | None) -> None:
        logger.info("signal %d: stopping; running attempts may finish in the grace period", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    executor.run(stop)
