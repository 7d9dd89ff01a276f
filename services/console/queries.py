"""What the console's pages and API read from the view: each question one indexed query.

Lists page by key (`after` the last id shown), never by OFFSET, so the thousandth page of a
million schedules costs what the first does. A filter by label, owner, state or trigger kind
walks the index of that column; a search is a prefix of the schedule id (the primary key).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kairos.services.console.database import ViewDb
from kairos.services.console.lateness import LATENESS_BOUNDS_MS
from kairos.services.console.view import ConsoleView
from kairos.streams.wire.dead_letters import REFUSED_CHANGES

PAGE_SIZE = 50


@dataclass(frozen=True)
class ScheduleFilter:
    """Which schedules a list shows; every field optional, all of them must hold."""

    prefix: str = ""
    owner: str | None = None
    label: tuple[str, str] | None = None
    paused: bool | None = None
    trigger_kind: str | None = None


class FilterError(ValueError):
    """A filter the console cannot apply; the message says how to write it."""


def parse_label(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise FilterError(f"label filter {text!r} is not key=value, e.g. team=payments")
    return key, value


_LIST_COLUMNS = (
    "s.schedule_id, s.owner, s.paused, s.trigger_kind, s.trigger, s.timezone, s.partition"
)


def list_schedules(
    view: ConsoleView, chosen: ScheduleFilter, after: str = "", limit: int = PAGE_SIZE
) -> list[dict[str, Any]]:
    """Up to `limit` schedules past `after` in id order, with their labels."""
    where = ["s.schedule_id > ?"]
    params: list[Any] = [after]
    source, order = "schedules s", "s.schedule_id"
    if chosen.label is not None and chosen.owner is None:
        # Walked in the labels' key order (key, value, schedule_id): ordering by the schedules'
        # column instead would sort every schedule carrying the label.
        source = "labels l JOIN schedules s ON s.schedule_id = l.schedule_id"
        order = "l.schedule_id"
        where += ["l.key = ?", "l.value = ?", "l.schedule_id > ?"]
        params += [*chosen.label, after]
    elif chosen.label is not None:
        # With an owner, its schedules (one team's, the fewer) are walked and each label checked.
        where.append(
            "EXISTS (SELECT 1 FROM labels l WHERE l.key = ? AND l.value = ? "
            "AND l.schedule_id = s.schedule_id)"
        )
        params += [*chosen.label]
    if chosen.prefix:
        # A range on the primary key: `LIKE` would not use the index for ids holding `_`.
        where += ["s.schedule_id >= ?", "s.schedule_id < ?"]
        params += [chosen.prefix, chosen.prefix + "\U0010ffff"]
    if chosen.owner is not None:
        where.append("s.owner = ?")
        params.append(chosen.owner)
    if chosen.paused is not None:
        where.append("s.paused = ?")
        params.append(int(chosen.paused))
    if chosen.trigger_kind is not None:
        where.append("s.trigger_kind = ?")
        params.append(chosen.trigger_kind)
    query = (
        f"SELECT {_LIST_COLUMNS} FROM {source} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?"
    )
    with view.connection() as db:
        rows = db.execute(query, [*params, limit]).fetchall()
        labels = _labels(db, [row[0] for row in rows])
    return [
        {
            "schedule_id": row[0],
            "owner": row[1],
            "state": "paused" if row[2] else "active",
            "trigger_kind": row[3],
            "trigger": row[4],
            "timezone": row[5],
            "partition": row[6],
            "labels": labels.get(row[0], {}),
        }
        for row in rows
    ]


def _labels(db: ViewDb, ids: list[str]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    if not ids:
        return found
    marks = ",".join("?" * len(ids))
    query = f"SELECT schedule_id, key, value FROM labels WHERE schedule_id IN ({marks})"
    for schedule_id, key, value in db.execute(query, ids):
        found.setdefault(schedule_id, {})[key] = value
    return found


def count_schedules(view: ConsoleView) -> int:
    return sum(schedules_by_partition(view).values())


def owners(view: ConsoleView, limit: int = 200) -> list[str]:
    """The owners of schedules, for the filter's choices (counted as schedules come and go)."""
    with view.connection() as db:
        rows = db.execute(
            "SELECT owner FROM owner_counts WHERE schedules > 0 AND owner != '' "
            "ORDER BY owner LIMIT ?",
            (limit,),
        ).fetchall()
    return [row[0] for row in rows]


def schedule(view: ConsoleView, schedule_id: str) -> dict[str, Any] | None:
    with view.connection() as db:
        row = db.execute(
            "SELECT schedule_id, owner, paused, trigger_kind, trigger, timezone, partition, "
            "at_offset, revision, changed_at, changed_by, definition FROM schedules "
            "WHERE schedule_id = ?",
            (schedule_id,),
        ).fetchone()
        if row is None:
            return None
        labels = _labels(db, [schedule_id]).get(schedule_id, {})
    keys = ("schedule_id", "owner", "paused", "trigger_kind", "trigger", "timezone", "partition")
    found = dict(zip(keys, row[:7], strict=True))
    found.update(
        paused=bool(row[2]),
        offset=row[7],
        revision=row[8],
        changed_at=row[9],
        changed_by=row[10],
        definition=json.loads(row[11]),
        labels=labels,
    )
    return found


def changes(view: ConsoleView, schedule_id: str, limit: int = 20) -> list[dict[str, Any]]:
    """The schedule's last changes, newest first, each with its definition (for the diff), the
    team its `kairos-team` header names (verified or not) and, for a change the tickers refused,
    the refusal's reason (its dead letter's)."""
    refused_classes = sorted(REFUSED_CHANGES)
    marks = ", ".join("?" for _ in refused_classes)
    with view.connection() as db:
        rows = db.execute(
            "SELECT c.change, c.revision, c.changed_at, c.changed_by, c.reason, c.definition, "
            "c.partition, c.at_offset, c.signing_team, d.reason, c.restores FROM changes c "
            "LEFT JOIN dead_letters d ON d.source_partition = c.partition "
            f"AND d.source_offset = c.at_offset AND d.error_class IN ({marks}) "
            "WHERE c.schedule_id = ? ORDER BY c.at_offset DESC LIMIT ?",
            (*refused_classes, schedule_id, limit),
        ).fetchall()
    keys = ("change", "revision", "changed_at", "changed_by", "reason")
    return [
        {
            **dict(zip(keys, row[:5], strict=True)),
            "definition": None if row[5] is None else json.loads(row[5]),
            "offset": row[7],
            "signing_team": row[8],
            "refused": row[9],
            "restores": bool(row[10]),
        }
        for row in rows
    ]


_TAKEN = (
    "c.schedule_id = ? AND c.restores = 0 AND NOT EXISTS (SELECT 1 FROM dead_letters d "
    "WHERE d.source_partition = c.partition AND d.source_offset = c.at_offset "
    "AND d.error_class IN ({marks}))"
)


def held_change(
    view: ConsoleView, schedule_id: str, awaiting_from: int | None
) -> tuple[dict[str, Any] | None, int]:
    """The change that made the schedule what its ticker holds (`None`: it holds none), and how many
    changes await its ticker, as `kairos.streams.readers.held_schedules` folds them: refused changes
    and restorations are skipped, and in a partition judged in signed mode a change at or past
    `awaiting_from` (its committed offset) is not known to be taken. `awaiting_from` is `None` for a
    partition judged in open mode, or not judged: every change is taken.

    A record marked as a restoration that differs from what is held is taken by an open ticker
    as a change; here it is skipped (no team's isolation rests on an open deployment)."""
    refused_classes = sorted(REFUSED_CHANGES)
    taken = _TAKEN.format(marks=", ".join("?" for _ in refused_classes))
    bound = "" if awaiting_from is None else " AND c.at_offset < ?"
    params: list[Any] = [schedule_id, *refused_classes]
    with view.connection() as db:
        row = db.execute(
            "SELECT c.change, c.revision, c.changed_at, c.changed_by, c.reason, c.definition, "
            f"c.at_offset, c.signing_team FROM changes c WHERE {taken}{bound} "
            "ORDER BY c.at_offset DESC LIMIT 1",
            params if awaiting_from is None else [*params, awaiting_from],
        ).fetchone()
        awaiting = 0
        if awaiting_from is not None:
            awaiting = db.execute(
                f"SELECT COUNT(*) FROM changes c WHERE {taken} AND c.at_offset >= ?",
                [*params, awaiting_from],
            ).fetchone()[0]
    if row is None or row[5] is None:
        return None, awaiting
    keys = ("change", "revision", "changed_at", "changed_by", "reason")
    held = {**dict(zip(keys, row[:5], strict=True)), "definition": json.loads(row[5])}
    held.update(offset=row[6], signing_team=row[7])
    return held, awaiting


def runs(
    view: ConsoleView, schedule_id: str, limit: int = 20, *, shown_only: bool = False
) -> list[dict[str, Any]]:
    """The schedule's last runs by nominal instant (then run id), newest first; with
    `shown_only`, only those fired or skipped (not one known by an early event alone)."""
    shown = " AND (fired_at IS NOT NULL OR status = 'skipped')" if shown_only else ""
    with view.connection() as db:
        rows = db.execute(
            "SELECT run_id, nominal_at, fired_at, lateness_ms, ticker, status, attempts, "
            f"executor, reason, finished_at FROM runs WHERE schedule_id = ?{shown} "
            "ORDER BY nominal_at DESC, run_id DESC LIMIT ?",
            (schedule_id, limit),
        ).fetchall()
    keys = (
        "run_id",
        "nominal_at",
        "fired_at",
        "lateness_ms",
        "ticker_instance",
        "status",
        "attempts",
        "executor",
        "reason",
        "finished_at",
    )
    return [dict(zip(keys, row, strict=True)) for row in rows]


@dataclass(frozen=True)
class Minute:
    """One UTC minute of activity: fires by when they were committed, and what went wrong."""

    minute: int
    fires: int
    lateness: list[int]
    skipped: int
    failed: int
    dead_lettered: int
    deadline_missed: int


def minutes(view: ConsoleView, since_minute: int, until_minute: int) -> list[Minute]:
    with view.connection() as db:
        rows = db.execute(
            "SELECT minute, fires, lateness, skipped, failed, dead_lettered, deadline_missed "
            "FROM minutes WHERE minute >= ? AND minute < ? ORDER BY minute",
            (since_minute, until_minute),
        ).fetchall()
    empty = [0] * len(LATENESS_BOUNDS_MS)
    return [
        Minute(row[0], row[1], json.loads(row[2]) or empty, row[3], row[4], row[5], row[6])
        for row in rows
    ]


def schedules_by_partition(view: ConsoleView) -> dict[int, int]:
    """How many schedules each partition holds, as the view counted them."""
    with view.connection() as db:
        rows = db.execute("SELECT partition, schedules FROM partition_counts")
        return {partition: count for partition, count in rows if count}


def dead_letters(view: ConsoleView, limit: int = 100) -> list[dict[str, Any]]:
    """The latest dead letters, each with the owner its schedule's latest run was fired for
    (the ticker's verdict; `None` when the view holds no run of it)."""
    with view.connection() as db:
        rows = db.execute(
            "SELECT d.source_topic, d.source_partition, d.source_offset, d.error_class, d.reason, "
            "d.dead_lettered_at, d.schedule_id, (SELECT r.owner FROM runs r WHERE "
            "r.schedule_id = d.schedule_id ORDER BY r.nominal_at DESC LIMIT 1) "
            "FROM dead_letters d ORDER BY d.dead_lettered_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
    keys = (
        "source_topic",
        "source_partition",
        "source_offset",
        "error_class",
        "reason",
        "dead_lettered_at",
        "schedule_id",
        "owner",
    )
    return [dict(zip(keys, row, strict=True)) for row in rows]


def downstream_of(view: ConsoleView, schedule_id: str, limit: int = 100) -> list[str]:
    """The schedules that wait for this one, by id."""
    with view.connection() as db:
        rows = db.execute(
            "SELECT schedule_id FROM upstreams WHERE upstream_id = ? ORDER BY schedule_id LIMIT ?",
            (schedule_id, limit),
        ).fetchall()
    return [row[0] for row in rows]


def statuses_at(view: ConsoleView, schedule_id: str, nominal_ms: int) -> list[str]:
    """The statuses of the schedule's runs at one nominal instant (its occurrence's, re-runs')."""
    with view.connection() as db:
        rows = db.execute(
            "SELECT status FROM runs WHERE schedule_id = ? AND nominal_at = ? ORDER BY run_id",
            (schedule_id, nominal_ms),
        ).fetchall()
    return [row[0] for row in rows]
