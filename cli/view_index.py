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
    """The console's view at `url`; a clear error when there is none to read."""
    if dialect_of(url) is SQLITE and not sqlite_path(url).is_file():
        raise KairosError(
            f"no console view at {shown_url(url)}: give the URL the console runs with "
            "(--view-url, KAIROS_CONSOLE_VIEW_URL)"
        )
    return ConsoleView(url)


def last_runs(view: ConsoleView, schedule_id: str, count: int) -> list[dict[str, Any]]:
    """The schedule's last `count` runs as `runs list` summarises them, oldest first."""
    summaries = []
    for row in reversed(queries.runs(view, schedule_id, count)):
        fired = row["fired_at"] is not None
        summaries.append(
            {
                "run_id": row["run_id"],
                "schedule_id": schedule_id,
                "nominal_at": from_epoch_ms(row["nominal_at"]),
                "fired_at": maybe_from_epoch_ms(row["fired_at"]),
                "lateness_ms": row["lateness_ms"],
                "ticker_instance": row["ticker_instance"],
                # The view keeps a run's first commit; the audit counts duplicates.
                "commits": 1 if fired else 0,
                "attempts": row["attempts"] if row["status"] != "requested" else 0,
                "status": row["status"] if fired or row["status"] != "requested" else "unknown",
            }
        )
    return summaries


def late_inputs(
    view: ConsoleView, since: datetime, schedule_id: str | None
) -> tuple[list[RunProgress], list[ReportedMiss]]:
    """The fired runs with a nominal instant at or after `since`, and the misses reported."""
    at = epoch_ms(since)
    with view.connection() as db:
        runs = db.execute(
            "SELECT r.run_id, r.schedule_id, r.nominal_at, "
            "EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.run_id "
            "AND e.kind = 'skipped'), "
            "(SELECT MIN(e.at_ms) FROM run_events e WHERE e.run_id = r.run_id "
            "AND e.kind = 'started'), "
            "(SELECT MIN(e.at_ms) FROM run_events e WHERE e.run_id = r.run_id "
            "AND e.kind = 'succeeded') "
            "FROM runs r WHERE r.nominal_at >= ? AND r.fired_at IS NOT NULL "
            "AND (? IS NULL OR r.schedule_id = ?)",
            (at, schedule_id, schedule_id),
        ).fetchall()
        misses = db.execute(
            "SELECT e.run_id, r.schedule_id, e.nominal_at, e.source, e.reason "
            "FROM run_events e JOIN runs r ON r.run_id = e.run_id "
            "WHERE e.kind = 'deadline_missed' AND e.nominal_at >= ? "
            "AND (? IS NULL OR r.schedule_id = ?)",
            (at, schedule_id, schedule_id),
        ).fetchall()
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


def records_behind(view: ConsoleView, settings: KafkaSettings) -> int:
    """How many records of the runs and run-events topics the view's follower has yet to read."""
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
