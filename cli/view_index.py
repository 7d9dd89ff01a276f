"""The console's view as an index for the CLI: `schedules describe --view` and `runs late --view`.

The view (docs/console.md) already holds every run by schedule and nominal instant, and each
run's events, as its follower read them from the topics: a schedule's last runs and the runs a
deadline judges are one indexed query there, where the topics hold them spread over every
partition. The view is as current as its follower: `records_behind` says how many records of the
runs and run-events topics it has not read yet, which the commands print beside what they show.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer, KafkaException, TopicPartition

from kairos.core.errors import KairosError
from kairos.core.instants import epoch_ms, from_epoch_ms, maybe_from_epoch_ms
from kairos.core.late_runs import ReportedMiss, RunProgress
from kairos.services.console import queries
from kairos.services.console.view import ConsoleView
from kairos.streams.kafka.settings import HISTORY_READERS_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.sql.dialects import SQLITE, dialect_of, shown_url, sqlite_path

ViewOption = Annotated[
    str | None,
    typer.Option(
        "--view",
        envvar="KAIROS_CONSOLE_VIEW_URL",
        help="Answer from the console's view (the URL the console runs with) instead of "
        "reading the topics: an indexed query, as current as the console's follower.",
    ),
]


def open_view(url: str) -> ConsoleView:
    """The console's view at `url`, opened to read only; a clear error when there is none of
    this release's schema (nothing is created or migrated: the console owns the view)."""
    if dialect_of(url) is SQLITE and not sqlite_path(url).is_file():
        raise KairosError(
            f"no console view at {shown_url(url)}: give the URL the console runs with "
            "(--view-url, KAIROS_CONSOLE_VIEW_URL)"
        )
    return ConsoleView(url, create=False)


def last_runs(view: ConsoleView, schedule_id: str, count: int) -> list[dict[str, Any]]:
    """The schedule's last `count` runs as `runs list` summarises them, oldest first: runs with
    a fire or a skip (an event whose fire the view has not read yet is no run to show)."""
    summaries = []
    for row in queries.runs(view, schedule_id, count, shown_only=True):
        fired = row["fired_at"] is not None
        summaries.append(
            {
                "run_id": row["run_id"],
                "schedule_id": schedule_id,
                "nominal_at": from_epoch_ms(row["nominal_at"]),
                "fired_at": maybe_from_epoch_ms(row["fired_at"]),
                "lateness_ms": row["lateness_ms"],
                "ticker_instance": row["ticker_instance"],
                # The view keeps one commit of a run; the audit counts duplicates.
                "commits": 1 if fired else 0,
                "attempts": row["attempts"] if row["status"] != "requested" else 0,
                "status": row["status"],
            }
        )
    return summaries[::-1]


def late_inputs(
    view: ConsoleView, since: datetime, schedule_id: str | None
) -> tuple[list[RunProgress], list[ReportedMiss]]:
    """The fired runs with a nominal instant at or after `since`, and the misses reported."""
    only, chosen = ("", ()) if schedule_id is None else (" AND r.schedule_id = ?", (schedule_id,))
    at = epoch_ms(since)
    try:
        with view.connection() as db:
            runs = db.execute(_PROGRESS + only, (at, *chosen)).fetchall()
            misses = db.execute(_MISSES + only, (at, *chosen)).fetchall()
    except Exception as error:
        if not view.is_error(error):
            raise
        raise KairosError(f"cannot read the console's view: {error}") from None
    return (
        [
            RunProgress(
                run_id,
                sid,
                from_epoch_ms(nominal),
                bool(skipped),
                maybe_from_epoch_ms(started),
                maybe_from_epoch_ms(succeeded),
            )
            for run_id, sid, nominal, skipped, started, succeeded in runs
        ],
        [
            ReportedMiss(run_id, sid, from_epoch_ms(nominal), source, reason)
            for run_id, sid, nominal, source, reason in misses
        ],
    )


_PROGRESS = (
    "SELECT r.run_id, r.schedule_id, r.nominal_at, "
    "EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.run_id AND e.kind = 'skipped'), "
    "(SELECT MIN(e.at_ms) FROM run_events e WHERE e.run_id = r.run_id AND e.kind = 'started'), "
    "(SELECT MIN(e.at_ms) FROM run_events e WHERE e.run_id = r.run_id AND e.kind = 'succeeded') "
    "FROM runs r WHERE r.nominal_at >= ? AND r.fired_at IS NOT NULL"
)
_MISSES = (
    "SELECT e.run_id, r.schedule_id, e.nominal_at, e.source, e.reason "
    "FROM run_events e JOIN runs r ON r.run_id = e.run_id "
    "WHERE e.kind = 'deadline_missed' AND e.nominal_at >= ?"
)


def records_behind(view: ConsoleView, settings: KafkaSettings) -> int:
    """At most how many records of the runs and run-events topics the view's follower has yet
    to read: the topics' ends count the markers that close transactions too, so a view that
    has read every run of a transactional writer can show one or two a partition."""
    reached = view.offsets()
    consumer = Consumer(
        settings.consumer_config(**{"group.id": settings.deployment_id(HISTORY_READERS_GROUP)})
    )
    try:
        behind = 0
        for role in (TopicRole.RUNS, TopicRole.RUN_EVENTS):
            topic = settings.layout.name(role)
            for partition in range(settings.layout.runs_partitions):
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10
                )
                behind += max(0, high - reached.get((topic, partition), 0))
        return behind
    except KafkaException as error:
        raise KairosError(f"cannot compare the view with the topics: {error}") from None
    finally:
        consumer.close()
