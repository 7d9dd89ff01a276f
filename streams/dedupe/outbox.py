"""The outbox: lifecycle events written in the transaction of the change that caused them.

An event is a row until an executor has published it; it is read in id order (each run's events
are written by successive transactions, so their ids increase) and deleted after publishing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kairos.core.instants import from_epoch_ms, maybe_from_epoch_ms
from kairos.streams.dedupe.base import DeadLetteredRun, EventKind, OutboxEvent, SourceRecord
from kairos.streams.dedupe.database import Connection, Database


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event as a transition writes it; the run's own fields are joined when it is read."""

    run_id: str
    kind: EventKind
    attempt: int
    executor_instance: str
    started_ms: int | None = None
    finished_ms: int | None = None
    reason: str | None = None
    next_attempt_ms: int | None = None
    dead_letter: bool = False


def write_event(db: Database, conn: Connection, event: NewEvent) -> None:
    conn.execute(
        db.q(
            "INSERT INTO kairos_outbox (run_id, kind, attempt, executor_instance, started_ms, "
            "finished_ms, reason, next_attempt_ms, dead_letter) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        (
            event.run_id,
            event.kind.value,
            event.attempt,
            event.executor_instance,
            event.started_ms,
            event.finished_ms,
            event.reason,
            event.next_attempt_ms,
            int(event.dead_letter),
        ),
    )


def oldest_events(db: Database, conn: Connection, limit: int) -> list[tuple[int, OutboxEvent]]:
    """Up to `limit` events in the order they were written, each with its outbox id."""
    rows = conn.execute(
        db.q(
            "SELECT o.id, o.run_id, r.schedule_id, o.kind, o.attempt, o.executor_instance, "
            "r.nominal_ms, r.fired_ms, o.started_ms, o.finished_ms, o.reason, "
            "o.next_attempt_ms, o.dead_letter, r.source_topic, r.source_partition, "
            "r.source_offset, r.value, r.owner "
            "FROM kairos_outbox o JOIN kairos_runs r ON r.run_id = o.run_id "
            "ORDER BY o.id LIMIT ?"
        ),
        (limit,),
    ).fetchall()
    return [(row[0], _outbox_event(row[1:])) for row in rows]


def delete_events(db: Database, conn: Connection, ids: Sequence[int]) -> None:
    # By id, not "up to the last id": a transaction that committed after the read may hold a
    # smaller id, and its event has not been published.
    conn.execute(db.q(f"DELETE FROM kairos_outbox WHERE id IN ({', '.join('?' * len(ids))})"), ids)


def _outbox_event(row: Sequence[Any]) -> OutboxEvent:
    (
        run_id,
        schedule_id,
        kind,
        attempt,
        instance,
        nominal_ms,
        fired_ms,
        started_ms,
        finished_ms,
        reason,
        next_attempt_ms,
        dead_letter,
        topic,
        partition,
        offset,
        value,
        owner,
    ) = row
    return OutboxEvent(
        run_id=run_id,
        schedule_id=schedule_id,
        kind=EventKind(kind),
        attempt=attempt,
        executor_instance=instance,
        nominal_at=from_epoch_ms(nominal_ms),
        fired_at=from_epoch_ms(fired_ms),
        started_at=maybe_from_epoch_ms(started_ms),
        finished_at=maybe_from_epoch_ms(finished_ms),
        reason=reason,
        next_attempt_at=maybe_from_epoch_ms(next_attempt_ms),
        dead_letter=(
            DeadLetteredRun(SourceRecord(topic, partition, offset), bytes(value))
            if dead_letter
            else None
        ),
        # The store keeps no owner as '' (runs of ownerless schedules, and runs stored before
        # owners were); a RunEvent says none as null.
        owner=owner or None,
    )
