"""`kairos notifier`: reads the run events and dead letters (committed records only), and tells
each notice to the routes of its team (`kairos.services.notifier.notices`), at least once.

A delivery that gets no answer or a "try later" is tried again after a growing wait with
jitter, up to `attempts` tries; one that a receiver refuses (4xx, a redirect) or that runs out
of tries is dead-lettered with the reason, reported to the team (`kairos teams rejections`).
Any number of notifiers share the topics' partitions in one consumer group.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from kairos.core.notifications import Answer, Notice, retry_delay, wanted
from kairos.services.log_fields import run_fields
from kairos.services.notifier.delivery import Mail, deliver
from kairos.services.notifier.metrics import NotifierMetrics
from kairos.services.notifier.notices import dead_letter_notice, run_event_notice
from kairos.services.notifier.progress import Delivery, Lanes, Pending, Source
from kairos.services.notifier.routes import RoutesWatch
from kairos.services.notifier.settings import NotifierSettings
from kairos.services.probes import LoopHealth, group_readiness, probe_server, stall_limit_s
from kairos.streams.kafka.settings import NOTIFIERS_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import DecodeError, make_codecs
from kairos.streams.wire.dead_letters import NOTIFICATION_FAILED, dead_letter_record

logger = logging.getLogger(__name__)

COMMIT_EVERY_S = 1.0
BATCH = 200


class Notifier:
    def __init__(self, kafka: KafkaSettings, settings: NotifierSettings) -> None:
        self._settings = settings
        self._routes = RoutesWatch(settings.routes_file)
        self._codecs = make_codecs()
        self._topics = {role: kafka.layout.name(role) for role in TopicRole}
        group = settings.group_id or kafka.deployment_id(NOTIFIERS_GROUP)
        reset = "earliest" if settings.from_beginning else "latest"
        self._consumer = Consumer(
            kafka.group_member_config(
                group, settings.instance, 10_000, **{"auto.offset.reset": reset}
            )
        )
        self._producer = Producer(kafka.producer_config(**{"client.id": settings.instance}))
        self._mail = (
            None
            if settings.smtp_host is None
            else Mail(settings.smtp_host, settings.smtp_port, settings.smtp_from)
        )
        self._pending = Pending()
        self._lanes = Lanes(settings.per_route)
        self._ready: list[Delivery] = []
        self._retries: list[tuple[float, int, Delivery]] = []
        self._order = itertools.count()
        self._running: dict[Future[tuple[Answer, str]], Delivery] = {}
        self._rng = random.Random()
        self._paused = False
        self._assigned = False
        """Whether the group gave this notifier an assignment yet: it is ready from then on."""
        self.metrics = NotifierMetrics()
        self.health = LoopHealth(stall_limit_s(kafka), time.monotonic())

    def run(self, stop: threading.Event) -> None:
        topics = [self._topics[TopicRole.RUN_EVENTS], self._topics[TopicRole.DEAD_LETTERS]]
        self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._revoked)
        last_commit = time.monotonic()
        settings = self._settings
        pool = ThreadPoolExecutor(settings.concurrency, "notify")
        try:
            with probe_server(
                settings.metrics_host, settings.metrics_port, self.metrics.registry, self.health
            ):
                while not stop.is_set():
                    self._turn(pool)
                    if time.monotonic() - last_commit >= COMMIT_EVERY_S:
                        self._commit(self._pending.committable())
                        last_commit = time.monotonic()
                        self.metrics.pending.set(self._pending.count())
                    self.health.turned(time.monotonic(), group_readiness(True, self._assigned))
        finally:
            # Deliveries still running are not waited for: their records are not committed, so
            # the next notifier delivers them again.
            pool.shutdown(wait=False, cancel_futures=True)
        self._commit(self._pending.committable())
        self._consumer.close()
        self._producer.flush(10)

    def _turn(self, pool: ThreadPoolExecutor) -> None:
        self._routes.refresh()
        self._report_route_problems()
        self._intake()
        self._finish()
        self._launch(pool)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # librdkafka serves the first assignment even when it is empty (a standby).
        self._assigned = True
        logger.info(
            "notifier %s assigned %d partition(s)", self._settings.instance, len(partitions)
        )

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = [(p.topic, p.partition) for p in partitions]
        self._commit(self._pending.committable(revoked))
        self._pending.forget(revoked)

    def _intake(self) -> None:
        full = self._pending.count() >= self._settings.max_pending
        if full or self._paused:
            # Paused again each turn while full: a partition assigned meanwhile is paused too.
            assignment = self._consumer.assignment()
            (self._consumer.pause if full else self._consumer.resume)(assignment)
            if full != self._paused:
                logger.info("notifier intake %s", "paused: too much undone" if full else "resumed")
            self._paused = full
        for message in self._consumer.consume(BATCH, timeout=0.05 if self._running else 0.2):
            if message.error() is not None:
                logger.warning("notifier consume: %s", message.error())
                continue
            self._take(message)

    def _take(self, message: Message) -> None:
        topic, value = str(message.topic()), message.value()
        source = Source(
            topic, message.partition() or 0, message.offset() or 0, message.key(), value
        )
        notice = None
        try:
            if value is not None and topic == self._topics[TopicRole.RUN_EVENTS]:
                notice = run_event_notice(self._codecs.run_event.decode(value))
            elif value is not None:
                notice = dead_letter_notice(self._codecs.dead_letter.decode(value))
        except DecodeError as error:
            logger.warning(
                "notifier skips %s[%d]@%d: %s", topic, source.partition, source.offset, error
            )
        deliveries = [] if notice is None else self._deliveries(notice, source)
        if notice is not None and not deliveries and notice.team in self._routes.routes.broken:
            # Its team wrote routes and none can be used: told where it reads its rejections.
            reason = (
                f"notice {notice.notice_id} of team {notice.team} not delivered: none of the "
                "team's routes can be used (the routes file's problems were reported)"
            )
            self._publish_dead_letter(source, reason, notice.team)
        self._pending.read(source, {d.route.name for d in deliveries})
        for delivery in deliveries:
            if self._lanes.enter(delivery):
                self._ready.append(delivery)

    def _deliveries(self, notice: Notice, source: Source) -> list[Delivery]:
        routes = self._routes.routes.of(notice.team)
        return [Delivery(notice, route, source) for route in routes if wanted(route, notice)]

    def _launch(self, pool: ThreadPoolExecutor) -> None:
        now = time.monotonic()
        while self._retries and self._retries[0][0] <= now:
            _, _, delivery = heapq.heappop(self._retries)
            if self._lanes.enter(delivery):
                self._ready.append(delivery)
        while self._ready and len(self._running) < self._settings.concurrency:
            delivery = self._ready.pop(0)
            if not self._still_owed(delivery):
                following = self._lanes.leave(delivery)
                if following is not None:
                    self._ready.append(following)
                continue
            delivery.tries += 1
            secret = self._routes.routes.secrets.get(delivery.lane)
            timeout_s = self._settings.timeout.total_seconds()
            future = pool.submit(
                deliver, delivery.route, delivery.notice, secret, self._mail, timeout_s
            )
            self._running[future] = delivery

    def _still_owed(self, delivery: Delivery) -> bool:
        """Whether a delivery waiting its turn is still to be made, on its route as it is now:
        its partition may have moved to another notifier (which delivers it), and its route may
        have been changed (it goes as changed) or removed (it is not made) since."""
        if not self._pending.owes(delivery.source, delivery.route.name):
            return False
        team, name = delivery.lane
        current = next((r for r in self._routes.routes.of(team) if r.name == name), None)
        if current is None or not wanted(current, delivery.notice):
            logger.info(
                "notice %s: route %s/%s removed, not sent", delivery.notice.notice_id, team, name
            )
            self._pending.done(delivery.source, name)
            return False
        delivery.route = current
        return True

    def _finish(self) -> None:
        for future in [f for f in self._running if f.done()]:
            delivery = self._running.pop(future)
            try:
                answer, why = future.result()
            except Exception as error:  # a worker's failure is this notice's, not the notifier's
                answer, why = Answer.GIVE_UP, f"cannot be sent: {type(error).__name__}: {error}"
            following = self._lanes.leave(delivery)
            if following is not None:
                self._ready.append(following)
            self._settle(delivery, answer, why)

    def _settle(self, delivery: Delivery, answer: Answer, why: str) -> None:
        notice, route = delivery.notice, delivery.route
        fields = run_fields(notice.run_id or "", notice.schedule_id or "", notice.team)
        retried = answer is Answer.RETRY and delivery.tries < self._settings.attempts
        result = (
            "delivered" if answer is Answer.DELIVERED else "retried" if retried else "dead_lettered"
        )
        self.metrics.deliveries.labels(route.kind, result).inc()
        where = f"notice {notice.notice_id} to {notice.team}/{route.name}: {why}"
        if retried:
            wait = retry_delay(
                delivery.tries, self._settings.first_retry, self._settings.longest_retry, self._rng
            )
            logger.warning(
                "%s; try %d in %.1f s",
                where,
                delivery.tries + 1,
                wait.total_seconds(),
                extra=fields,
            )
            due = time.monotonic() + wait.total_seconds()
            heapq.heappush(self._retries, (due, next(self._order), delivery))
            return
        if answer is Answer.DELIVERED:
            logger.info("%s", where, extra=fields)
        else:
            self._dead_letter(delivery, why, fields)
        self._pending.done(delivery.source, route.name)

    def _dead_letter(self, delivery: Delivery, why: str, fields: dict[str, object]) -> None:
        notice, route, source = delivery.notice, delivery.route, delivery.source
        reason = (
            f"notice {notice.notice_id} on route {route.name} ({route.kind}) of team "
            f"{notice.team} not delivered after {delivery.tries} tries: {why}"
        )
        logger.error("%s", reason, extra=fields)
        self._publish_dead_letter(source, reason, notice.team)

    def _publish_dead_letter(self, source: Source, reason: str, team: str) -> None:
        record = dead_letter_record(
            source_topic=source.topic,
            source_partition=source.partition,
            source_offset=source.offset,
            key=source.key,
            value=source.value,
            reason=reason,
            error_class=NOTIFICATION_FAILED,
            dead_lettered_at=datetime.now(UTC),
            dead_lettered_by=self._settings.instance,
            reported_to=team,
        )
        topic = self._topics[TopicRole.DEAD_LETTERS]
        self._producer.produce(topic, self._codecs.dead_letter.encode(record), source.key)
        # Acknowledged before the record's offset may be committed: a dead letter lost with the
        # notifier would leave the team told nothing.
        if self._producer.flush(30) != 0:
            raise RuntimeError(f"a dead letter for team {team} was not acknowledged")

    def _report_route_problems(self) -> None:
        """A route that cannot be used is reported where its team reads its rejections."""
        for problem in self._routes.unreported():
            reason = f"{problem.shown(str(self._settings.routes_file))}: not used until fixed"
            logger.error("%s", reason)
            self._publish_dead_letter(
                Source("routes-file", 0, -1, problem.team.encode(), None), reason, problem.team
            )

    def _commit(self, offsets: list[TopicPartition]) -> None:
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as error:  # a partition moved meanwhile: the next owner delivers again
            logger.warning("notifier commit: %s", error)
