"""The ticker process: owns schedules partitions, fires due occurrences in fenced transactions.

One loop, one thread, through four rooms (docs/architecture.md, "The ticker's rooms"):

- the session (`session.py`) owns the connected clients of one group membership;
- the take-over (`takeover.py`) owns the partitions arriving and owned: it waits for their
  committed offsets, restores them from the changelog in slices and resumes them;
- the turn planner (`planner.py`) turns the consumed changes, the owned partitions and `now` into
  one transaction's work;
- the commit path (`commit.py`) sends that work in one Kafka transaction together with the
  offsets of every owned partition and the member's group metadata, and only then moves the
  stores.

Rebalance callbacks run only inside `consume`, between transactions, so no transaction is ever
open across an ownership change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import Message, TopicPartition

from kairos.services.probes import LoopHealth, group_readiness, probe_server, stall_limit_s
from kairos.services.ticker.calendar_feed import TickerCalendars
from kairos.services.ticker.changes import ScheduleChanges
from kairos.services.ticker.clients import ConfluentTickerClients, TickerClients
from kairos.services.ticker.commit import CommitPath
from kairos.services.ticker.failure_pause import FailurePauses
from kairos.services.ticker.garbage import IdleCollector
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.ownership import TickerOwnership
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.planner import Budgets, TurnPlanner
from kairos.services.ticker.quarantine import Quarantine
from kairos.services.ticker.quotas import count_quota_use
from kairos.services.ticker.session import SessionParts, TickerSession
from kairos.services.ticker.settings import TickerSettings, ensure_state_dir
from kairos.services.ticker.state_room import CHECK_EVERY_S, StateRoom
from kairos.services.ticker.transaction import Topics
from kairos.services.ticker.upcoming import (
    PREPARE_MIN_IDLE_S,
    prepare_upcoming,
    seconds_until_next_due,
)
from kairos.services.ticker.upstream_book import UpstreamBook
from kairos.services.ticker.watchdog import Backoff, TransactionWatchdog
from kairos.streams.kafka.acls import DeploymentNames, Role
from kairos.streams.kafka.authorization import RoleAccess
from kairos.streams.kafka.failures import is_retryable
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicLayout, TopicRole
from kairos.streams.wire.codec import Codecs, make_codecs

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


SLICE_S = 0.1
"""The longest a turn restores arriving partitions while owned ones have nothing due sooner."""
MIN_SLICE_S = 0.02
"""What a turn restores even when fires are due now, so a restore never starves under load."""


class NotConnectedError(RuntimeError):
    """A turn was asked of a ticker between sessions (`connect()` first)."""


class Ticker:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: TickerSettings,
        clock: Clock = utc_now,
        codecs: Codecs | None = None,
        clients: TickerClients | None = None,
    ) -> None:
        ensure_state_dir(settings.state_dir)
        self.kafka = kafka
        self.settings = settings
        self.clock = clock
        self.codecs = codecs or make_codecs()
        self.metrics = TickerMetrics()
        self.metrics.schedules_partitions.set(kafka.schedules_partitions)
        self.health = LoopHealth(stall_limit_s(kafka), time.monotonic())
        self.topics = _topics(kafka.layout)
        names = DeploymentNames.of(kafka, ticker_group=settings.group(kafka))
        self._access = RoleAccess(kafka, Role.TICKER, names)
        self._clients = clients or ConfluentTickerClients(kafka, self.codecs, self._access)
        self._failure_pauses = FailurePauses(kafka.schedules_partitions)
        self._ownership = (
            TickerOwnership(int(settings.signature_max_age_s * 1000), self._failure_pauses.earned)
            if settings.ownership is Ownership.SIGNED
            else None
        )
        changes = ScheduleChanges(self.codecs, f"ticker:{settings.instance}", self._ownership)
        quarantine = Quarantine(self.codecs, self.topics.schedules, f"ticker:{settings.instance}")
        self._calendars = TickerCalendars(
            None if self._ownership is None else self._ownership.registered_teams
        )
        signed = settings.ownership is Ownership.SIGNED
        self._upstreams = UpstreamBook(self._clients.upstream_partitions(signed))
        self._parts = SessionParts(
            kafka,
            settings,
            self.topics,
            self.codecs,
            self.metrics,
            clock,
            self._calendars.lookup,
            changes,
            self._upstreams,
        )
        self._planner = TurnPlanner(
            changes,
            quarantine,
            Budgets(settings.max_decisions_per_transaction, settings.catchup_per_transaction),
        )
        self._commit = CommitPath(
            settings.instance, self.topics.schedules, quarantine, self.metrics, clock
        )
        self._garbage = IdleCollector()
        self._session: TickerSession | None = None
        """The group membership of now; none between sessions (after a failure, until rebuilt)."""

    @property
    def session(self) -> TickerSession | None:
        """The group membership of now, if any."""
        return self._session

    @property
    def owned(self) -> dict[int, OwnedPartition]:
        """The partitions this ticker owns now (none between group sessions)."""
        return {} if self._session is None else self._session.take_over.owned

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Fire until `stop` is set; then leave the group and close the stores cleanly."""
        s = self.settings
        with probe_server(s.metrics_host, s.metrics_port, self.metrics.registry, self.health):
            self._run(stop)

    def _run(self, stop: threading.Event) -> None:
        limit_s = 2 * self.settings.transaction_timeout_ms / 1000 + 30
        watchdog = TransactionWatchdog(
            self.settings.instance,
            limit_s,
            lambda: None if self._session is None else self._session.transactions,
        )
        threading.Thread(target=watchdog.run, args=(stop,), daemon=True).start()
        backoff = Backoff()
        room = StateRoom(self.settings.state_dir, self.settings.instance)
        try:
            while not stop.is_set():
                self.health.turned(time.monotonic(), self._readiness())
                try:
                    if self._session is None:
                        if not room.enough():
                            stop.wait(CHECK_EVERY_S)
                            continue
                        self.connect()
                    self.turn()
                    backoff.reset()
                except Exception as failure:
                    # Fenced, or the broker unreachable for longer than a client will wait:
                    # drop the partitions and rejoin. The stores hold only committed state, so
                    # nothing decided is lost and nothing is decided twice. Refused (named by
                    # the grant it lacks) or not retryable: stop.
                    self._access.raise_if_refused(failure)
                    if not is_retryable(failure):
                        raise
                    logger.error(
                        "instance=%s %s; dropping partitions and rejoining in %.1fs",
                        self.settings.instance,
                        failure,
                        backoff.delay_s,
                    )
                    self.disconnect()
                    stop.wait(backoff.next())
        finally:
            self.disconnect()

    def _readiness(self) -> str | None:
        session = self._session
        return group_readiness(session is not None, session is not None and session.assigned)

    def connect(self) -> None:
        """Open a session: the ticker's grants checked (first time), calendars read to their
        end, then the clients (`TickerSession.open`)."""
        self._clients.check_access()
        # The teams first: calendar changes are judged with them.
        if self._ownership is not None:
            self._ownership.start(self._clients.teams())
        self._calendars.start(self._clients.calendars())
        self._failure_pauses.start(self._clients.run_outcomes())
        self._upstreams.start()
        self._session = TickerSession.open(self._clients, self._parts)

    def disconnect(self) -> None:
        """Close the session, if any: leave the group, close the stores and the calendars."""
        session, self._session = self._session, None
        try:
            if session is not None:
                session.close()
        finally:
            self._calendars.close()
            self._failure_pauses.close()
            self._upstreams.close()
            if self._ownership is not None:
                self._ownership.close()

    # -- one turn ----------------------------------------------------------------------------

    def turn(self) -> None:
        """Take over what settled, consume, plan and commit one transaction (if any work)."""
        session = self._session
        if session is None:
            raise NotConnectedError("the ticker has no session: connect() first")
        take_over = session.take_over
        owned = take_over.owned
        if take_over.arriving:
            until_due_s = seconds_until_next_due(owned, self.clock())
            take_over.settle(session.member, budget_s=max(MIN_SLICE_S, min(SLICE_S, until_due_s)))
        if self._ownership is not None:
            self._ownership.follow()
        self._calendars.follow(owned.values())
        until_due_s = seconds_until_next_due(owned, self.clock())
        # A restore in progress takes the idle time, a slice per turn.
        wait_s = 0.0 if take_over.restoring else min(self.settings.max_wait_s, until_due_s)
        if wait_s > PREPARE_MIN_IDLE_S:
            # Idle until the next fire: decode and encode ahead what upcoming fires need, so a
            # herd spends its time sending, not computing.
            spent_s = prepare_upcoming(
                owned, session.transactions, self.clock, budget_s=wait_s * 0.8
            )
            spent_s += self._count_quota_use(owned, budget_s=(wait_s - spent_s) * 0.8)
            wait_s -= spent_s
            until_due_s -= spent_s
        # Every turn, idle or not: a steady load leaves no idle time, and without freezing the
        # collector's automatic full walks over everything held stall it for seconds.
        self._garbage.idle(until_due_s)
        messages = session.member.consume(num_messages=10_000, timeout=max(0.0, wait_s))
        session.raise_callback_failure()
        work = self._planner.plan(self._changes_of(messages), owned, self.clock())
        self._failure_pauses.add_pauses(work, owned)
        if not work.empty:
            self._commit.commit(work, owned, session.transactions, session.member)
            self._failure_pauses.fired(work)
        self.metrics.schedules_decoded.set(sum(one.decoded for one in owned.values()))
        for partition in work.held & owned.keys():  # read again: a change still settles
            offset = owned[partition].next_offset
            logger.info(
                "schedule change held partition=%d offset=%d",
                partition,
                offset,
                extra={"partition": partition},
            )
            session.member.seek(TopicPartition(self.topics.schedules, partition, offset))

    def _count_quota_use(self, owned: dict[int, OwnedPartition], budget_s: float) -> float:
        """Count the owned partitions' quota use in what is left of the idle time, once a team
        is limited, so the first change a quota judges finds its partition counted rather than
        count it (seconds at a million schedules, every fire of the turn waiting); the time
        spent. Without a limited team, nothing is counted; nor in less idle time than preparing
        needs (a slice of the count takes a few milliseconds)."""
        limited = self._ownership is not None and self._ownership.limits_any
        if not limited or budget_s <= PREPARE_MIN_IDLE_S:
            return 0.0
        return count_quota_use((one.use for one in owned.values()), budget_s)

    def _changes_of(self, messages: list[Message]) -> list[Message]:
        """The schedule changes among `messages`; a consumer error is logged, or, when the
        cluster refused, raised naming the missing grant."""
        changes = []
        for message in messages:
            error = message.error()
            if error is None:
                changes.append(message)
                continue
            self._access.raise_if_refused(error, message.topic())
            logger.warning("instance=%s consumer error: %s", self.settings.instance, error.str())
        return changes


def _topics(layout: TopicLayout) -> Topics:
    return Topics(
        schedules=layout.name(TopicRole.SCHEDULES),
        changelog=layout.name(TopicRole.CHANGELOG),
        runs=layout.name(TopicRole.RUNS),
        run_events=layout.name(TopicRole.RUN_EVENTS),
        dead_letters=layout.name(TopicRole.DEAD_LETTERS),
    )
