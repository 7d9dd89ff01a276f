"""Schedule events into the open transaction: a new state per change, or a dead letter.

What each record means is `kairos.streams.wire.schedule_events`'s to say. A record it rejects
(undecodable, keyed wrongly, on the wrong partition, an invalid definition) is dead-lettered
with the reason inside the same transaction as the offset that passes it, so it is
dead-lettered exactly once and the ticker keeps running. The ticker is the only consumer of the
schedules topic that dead-letters.
"""

from __future__ import annotations

import logging
from datetime import datetime

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kairos.core.errors import KairosError
from kairos.core.firing import Outcome, ScheduleState, deleted, upserted
from kairos.core.quotas import Trigger, quota_refusal, rerun_quota_refusal, schedule_use
from kairos.core.reruns import judge_rerun, take_rerun
from kairos.services.ticker.lifecycle import stale_reason
from kairos.services.ticker.ownership import TickerOwnership, restoring_event
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.quotas import RecentReruns, state_use
from kairos.services.ticker.work import TransactionWork
from kairos.streams.kafka.ports import GroupMember
from kairos.streams.kafka.topic_check import (
    TopicProblem,
    changelog_partition_problem,
    schedules_partition_problem,
)
from kairos.streams.kafka.topics import TopicLayout, TopicRole
from kairos.streams.state.state_store import StateStoreError
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.dead_letters import (
    OWNERSHIP_REFUSED,
    QUOTA_EXCEEDED,
    RERUN_OUT_OF_BOUNDS,
    STALE_CHANGE,
    dead_letter_record,
)
from kairos.streams.wire.schedule_events import (
    RejectedEvent,
    RerunRemoved,
    RerunRequested,
    ScheduleChange,
    ScheduleDeleted,
    ScheduleUpserted,
    if_version_mark,
    is_restoration,
    read_schedule_message,
    restores_mark,
)
from kairos.streams.wire.signing import Refused

logger = logging.getLogger(__name__)


class SchedulesTopicUnknownError(KairosError):
    """The broker has no schedules topic: the ticker cannot tell where each schedule belongs.

    Retried, as a calendars topic that is not there yet is: the ticker may start before
    `kairos topics create`, and a broker of a cluster lists a topic created a moment ago as
    unknown until it has read the creation from the metadata log (each metadata request may go
    to another broker). The log names the fix at every attempt."""

    retryable = True

    def __init__(self, topic: str, reason: str) -> None:
        self.topic = topic
        self.reason = reason
        super().__init__(f"cannot learn the partition count of {topic}: {reason}")


class PartitionCountError(KairosError):
    """The schedules topic or its changelog does not have the deployment's partition count:
    firing on it would put schedules where their history and state are not."""

    def __init__(self, problem: TopicProblem) -> None:
        self.problem = problem
        super().__init__(f"refusing to fire: {problem.line()}")


class SchedulesTopicGrownError(KairosError):
    def __init__(self, learned: int, beyond: list[int]) -> None:
        self.learned = learned
        self.beyond = beyond
        super().__init__(
            f"assigned schedules partitions {beyond} beyond the {learned} the topic had: it was "
            "grown while the ticker ran"
        )


class ScheduleChanges:
    def __init__(
        self, codecs: Codecs, dead_lettered_by: str, ownership: TickerOwnership | None = None
    ) -> None:
        self.codecs = codecs
        self.dead_lettered_by = dead_lettered_by
        self.ownership = ownership
        """The ownership rules changes must pass (`--ownership signed`); `None`: open."""
        self.partitions: int | None = None
        """The schedules topic's partition count, which decides each record's rightful place."""
        self.recent_reruns = RecentReruns()

    def learn_partitions(
        self, consumer: GroupMember, layout: TopicLayout, timeout_s: float = 30
    ) -> None:
        """Ask the broker for the schedules and changelog topics' partition counts, and refuse
        (`PartitionCountError`) unless both are the layout's, which is fixed (docs/topics.md):
        once per connection, never inside a rebalance callback, where confluent-kafka's metadata
        call aborts the process (CallState_get assertion)."""
        counts = [
            self._partition_count(consumer, layout.name(role), timeout_s)
            for role in (TopicRole.SCHEDULES, TopicRole.CHANGELOG)
        ]
        problem = schedules_partition_problem(layout, counts[0]) or changelog_partition_problem(
            layout, counts[1]
        )
        if problem is not None:
            raise PartitionCountError(problem)
        self.partitions = counts[0]

    @staticmethod
    def _partition_count(consumer: GroupMember, topic: str, timeout_s: float) -> int:
        # A broker that does not answer raises KafkaException: the ticker retries its connection.
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        refused = found is not None and found.error is not None
        if refused and found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            # Refused (not authorized), not absent: the run loop names the missing grant.
            raise KafkaException(found.error)
        if found is None or found.error is not None or not found.partitions:
            raise SchedulesTopicUnknownError(
                topic, "the broker does not know the topic; create it with `kairos topics create`"
            )
        return len(found.partitions)

    def check_assigned(self, assigned: list[TopicPartition]) -> None:
        """A partition beyond the learned count means the topic grew while the ticker ran (a
        `kafka-topics --alter`): rebuilding re-learns the count, and `learn_partitions` refuses."""
        assert self.partitions is not None, "learn_partitions comes with every connection"
        beyond = sorted(tp.partition for tp in assigned if tp.partition >= self.partitions)
        if beyond:
            raise SchedulesTopicGrownError(self.partitions, beyond)

    def take(
        self,
        owned: OwnedPartition,
        message: Message,
        offset: int,
        now: datetime,
        work: TransactionWork,
    ) -> bool:
        """Apply the change; `False` when it is held, to be taken again (see `work.settle`)."""
        assert self.partitions is not None, "learn_partitions comes with every connection"
        try:
            change = read_schedule_message(self.codecs.schedule_event, message, self.partitions)
            if isinstance(change, RejectedEvent):
                self._dead_letter(str(message.topic()), change, now, work)
                return True
            if isinstance(change, RerunRemoved):
                return True
            state = work.current(owned, change.schedule_id)
            restores = restores_mark(message.headers())
            held = state.schedule_with_id() if restores and state is not None else None
            if is_restoration(restores, change, held):
                return True
            if isinstance(change, RerunRequested) and not _fits(
                owned.partition, change, state, work
            ):
                # Judged in the transaction that fires it, so that a verdict counted against a
                # quota is never made twice; the next transaction has the room for it whole.
                work.held.add(owned.partition)
                return False
            if self._refused(owned, message, change, state=state, now=now, work=work):
                return True
            if isinstance(change, RerunRequested):
                return self._rerun(owned, message, change, now, work)
            return self._apply(owned, change, offset, now, work)
        except StateStoreError:
            raise  # the store, not the change: judged again after the ticker rejoins
        except Exception as failure:
            # Confined: whatever else goes wrong applying one event (deciding what the change
            # owes, reading the stored state) must not stop the partition for everyone.
            logger.exception(
                "schedule event partition=%s offset=%s could not be applied",
                owned.partition,
                offset,
            )
            reason = (
                f"cannot be applied ({type(failure).__name__}: {failure}); publish a corrected "
                "definition"
            )
            unappliable = RejectedEvent(
                owned.partition,
                offset,
                message.key(),
                message.value(),
                reason,
                type(failure).__name__,
            )
            self._dead_letter(str(message.topic()), unappliable, now, work)
            return True

    def _refused(
        self,
        owned: OwnedPartition,
        message: Message,
        change: ScheduleChange | RerunRequested,
        *,
        state: ScheduleState | None,
        now: datetime,
        work: TransactionWork,
    ) -> bool:
        """Refuse `change` if the ownership rules or its owner's quota say so (`_refuse`)."""
        refusal = self._refusal(owned, message, change, state, work, now=now)
        if refusal is None:
            return False
        self._refuse(
            owned.partition, message, change, state=state, refusal=refusal, now=now, work=work
        )
        return True

    def _refusal(
        self,
        owned: OwnedPartition,
        message: Message,
        change: ScheduleChange | RerunRequested,
        state: ScheduleState | None,
        work: TransactionWork,
        *,
        now: datetime,
    ) -> tuple[Refused, str] | None:
        """Why the ownership rules, a re-run's bounds or the owner's quota refuse `change`, with
        the dead letter's error class; `None` when it is taken. Without `--ownership signed`,
        only the bounds of a re-run, and a change marked for a version left since, refuse."""
        if not isinstance(change, RerunRequested):
            stale = stale_reason(if_version_mark(message.headers()), change, state)
            if stale is not None:
                return Refused(stale, None), STALE_CHANGE
        if self.ownership is not None:
            left = None if state is not None else work.floor(owned, change.schedule_id)
            refused = self.ownership.refused(message, change, state, left)
            if refused is not None:
                return refused, OWNERSHIP_REFUSED
        if isinstance(change, RerunRequested):
            if state is None:
                return None  # dead-lettered by _rerun: there is nothing to re-run
            return self._rerun_refusal(owned, message, change, (state, work), now)
        if self.ownership is None:
            return None
        if not isinstance(change, ScheduleUpserted) or change.schedule.owner is None:
            return None
        if state is not None and state.settling:
            # Taken again after settling what the old definition owed: judged when first taken
            # (the settling state, which every owner restores, is that verdict's mark).
            return None
        team = change.schedule.owner
        quota = self.ownership.quota_of(team)
        if not quota.limited:
            return None
        assert self.partitions is not None, "learn_partitions comes with every connection"
        used = work.use_of(owned, team)
        after = used + schedule_use(Trigger.of(change.schedule))
        held = state_use(state)
        if held is not None and held[0] == team:
            after = after - held[1]
        reason = quota_refusal(
            team, quota, used, after, partition=owned.partition, partitions=self.partitions
        )
        return None if reason is None else (Refused(reason, team), QUOTA_EXCEEDED)

    def _rerun_refusal(
        self,
        owned: OwnedPartition,
        message: Message,
        rerun: RerunRequested,
        held: tuple[ScheduleState, TransactionWork],
        now: datetime,
    ) -> tuple[Refused, str] | None:
        """Why a request is refused, reported to the team that signed it: over the bounds every
        request keeps, whoever publishes it (judged as the audit judges it, `judge_rerun`), or
        over its owner's fires a minute. Counted against that quota when it is taken."""
        state, work = held
        verdict = judge_rerun(state, rerun.request, rerun.appended_at)
        if verdict is None:
            return None  # a retry of a completed request, or the rest of one taken before
        signer = None if self.ownership is None else self.ownership.signer(message)
        if verdict.refusal is not None:
            return Refused(verdict.refusal, signer), RERUN_OUT_OF_BOUNDS
        team = state.schedule.owner
        if self.ownership is None or team is None:
            return None  # quotas are the registered teams' (see _refusal)
        quota = self.ownership.quota_of(team)
        if quota.max_fires_per_minute is None:
            return None
        assert self.partitions is not None, "learn_partitions comes with every connection"
        partition = owned.partition
        recent = self.recent_reruns.fired(partition, team, now)
        reason = rerun_quota_refusal(
            team,
            quota,
            work.use_of(owned, team),
            (recent, verdict.runs),
            partition=partition,
            partitions=self.partitions,
        )
        if reason is not None:
            return Refused(reason, signer), QUOTA_EXCEEDED
        self.recent_reruns.add(partition, team, now, verdict.runs)
        return None

    def _refuse(
        self,
        partition: int,
        message: Message,
        change: ScheduleChange | RerunRequested,
        *,
        state: ScheduleState | None,
        refusal: tuple[Refused, str],
        now: datetime,
        work: TransactionWork,
    ) -> None:
        """Dead-letter a change the ownership rules or a quota refused (`refusal`: why, and the
        dead letter's error class), reported to the team, and restore its key to what is held
        (a re-run request's key to nothing)."""
        refused, error_class = refusal
        key, value = message.key(), message.value()
        rejected = RejectedEvent(partition, change.offset, key, value, refused.reason, error_class)
        self._dead_letter(str(message.topic()), rejected, now, work, reported_to=refused.team)
        restoring = None
        if state is not None and not isinstance(change, RerunRequested):
            restoring = restoring_event(
                state, self.codecs, self.dead_lettered_by, now, change.offset
            )
        assert key is not None  # read_schedule_message refuses a record without one
        work.restores[(partition, key)] = (restoring, change.offset)

    def _apply(
        self,
        owned: OwnedPartition,
        change: ScheduleChange,
        offset: int,
        now: datetime,
        work: TransactionWork,
    ) -> bool:
        schedule_id = change.schedule_id
        # Taken after a refusal in the same transaction: it is the key's latest record.
        work.restores.pop((owned.partition, schedule_id.encode()), None)
        state = work.current(owned, schedule_id)
        if isinstance(change, ScheduleDeleted):
            if state is None:
                return True
            outcome = deleted(state, change.changed_at, now, limit=work.settle_room)
        else:
            # Created, edited, paused or resumed: the definition says which.
            left = work.floor(owned, schedule_id) if state is None else None
            outcome = upserted(
                state,
                change.schedule,
                offset,
                change.changed_at,
                now,
                limit=work.settle_room,
                floor=None if left is None else left.last_decided,
                calendars=owned.calendars,
            )
        taken = work.settle(owned, schedule_id, outcome, state)
        if taken and self.ownership is not None:
            # Quotas are the registered teams': an open deployment has none to count against.
            work.count_use(owned.partition, state, outcome.state)
        return taken

    def _rerun(
        self,
        owned: OwnedPartition,
        message: Message,
        rerun: RerunRequested,
        now: datetime,
        work: TransactionWork,
    ) -> bool:
        """Fire a re-run request whole, under the definition in force when it is taken
        (`kairos.core.reruns`), in the transaction that takes it: it holds nothing after it on
        its partition. Its room is the re-runs' own (`TransactionWork.rerun_room`), never the
        catch-up budget (`_fits` says when it waits for the next transaction)."""
        request = rerun.request
        state = work.current(owned, request.schedule_id)
        if state is None or state.settling:
            problem = (
                "has no definition on this ticker (deleted, or never created)"
                if state is None
                else "is settling a change; its re-run cannot be ordered after it"
            )
            reason = (
                f"re-run request {request.request_id!r}: schedule {request.schedule_id!r} "
                f"{problem}; nothing was fired. Create the schedule, then request again"
            )
            refused = RejectedEvent(
                rerun.partition,
                rerun.offset,
                message.key(),
                message.value(),
                reason,
                "RerunRefusedError",
            )
            self._dead_letter(str(message.topic()), refused, now, work)
            return True
        taken = take_rerun(state, request, now)
        if taken.already_done:
            logger.info(
                "re-run request %s of %s is a retry: done before",
                request.request_id,
                request.schedule_id,
            )
            return True
        outcome = Outcome(taken.state, taken.decisions)
        work.rerun_room -= len(taken.decisions)
        work.reruns_taken.add(owned.partition)
        # Its definition record remembers the request as done: written like a redefinition.
        work.record(owned.partition, request.schedule_id, outcome, state, redefined=True)
        return True

    def _dead_letter(
        self,
        topic: str,
        rejected: RejectedEvent,
        now: datetime,
        work: TransactionWork,
        reported_to: str | None = None,
    ) -> None:
        logger.warning(
            "dead-lettering schedules partition=%s offset=%s: %s",
            rejected.partition,
            rejected.offset,
            rejected.reason,
        )
        record = dead_letter_record(
            source_topic=topic,
            source_partition=rejected.partition,
            source_offset=rejected.offset,
            key=rejected.key,
            value=rejected.value,
            reason=rejected.reason,
            error_class=rejected.error_class,
            dead_lettered_at=now,
            dead_lettered_by=self.dead_lettered_by,
            reported_to=reported_to,
        )
        work.dead_letters.append((record["key"], self.codecs.dead_letter.encode(record)))


def _fits(
    partition: int, rerun: RerunRequested, state: ScheduleState | None, work: TransactionWork
) -> bool:
    """Whether `rerun` is taken in this transaction. The first request of each partition always
    is, so that no partition's requests wait on another's; a later one when the runs it names fit
    the re-run room left. One that fires nothing (refused, a retry, no schedule) always fits."""
    if partition not in work.reruns_taken or state is None:
        return True
    verdict = judge_rerun(state, rerun.request, rerun.appended_at)
    return verdict is None or verdict.refusal is not None or verdict.runs <= work.rerun_room
