"""The console's view, one contract over SQLite and PostgreSQL: what a batch leaves behind, in
any order its records arrive, and what the pages' queries find in it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kairos.core.audit import FiredRun, HistoryEvent, RunEventRecord
from kairos.services.console import queries
from kairos.services.console.database import ViewDatabaseError
from kairos.services.console.lateness import percentile_ms
from kairos.services.console.view import (
    ChangeRow,
    ConsoleView,
    DeadLetterRow,
    ScheduleRow,
    ViewBatch,
    epoch_ms,
)
from kairos.streams.sql.dialects import SQLITE_SCHEME

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def view(request: pytest.FixtureRequest, tmp_path: Path) -> ConsoleView:
    if request.param == "sqlite":
        return ConsoleView(f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}")
    return ConsoleView(request.getfixturevalue("postgres_url"))


def row(schedule_id: str, partition: int = 0, **fields: object) -> ScheduleRow:
    base = ScheduleRow(
        schedule_id=schedule_id,
        owner="billing",
        paused=False,
        trigger_kind="cron",
        trigger="* * * * *",
        timezone="UTC",
        partition=partition,
        offset=0,
        revision=0,
        changed_at=epoch_ms(T0),
        changed_by="alice",
        definition=f'{{"id": "{schedule_id}", "cron": "* * * * *"}}',
        labels={},
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def fired(schedule_id: str, nominal: datetime, lateness_ms: int = 10) -> FiredRun:
    return FiredRun(
        run_id=f"{schedule_id}@{nominal:%Y-%m-%dT%H:%M:%SZ}",
        schedule_id=schedule_id,
        nominal=nominal,
        due_at=nominal,
        fired_at=nominal + timedelta(milliseconds=lateness_ms),
        lateness_ms=lateness_ms,
        attempt=1,
        ticker_instance="t1",
        schedule_offset=0,
        partition=0,
        offset=0,
    )


def event(run: FiredRun, kind: str, attempt: int = 1, reason: str | None = None) -> RunEventRecord:
    return RunEventRecord(
        run_id=run.run_id,
        schedule_id=run.schedule_id,
        kind=kind,
        attempt=attempt,
        source="e1",
        nominal=run.nominal,
        fired_at=run.fired_at,
        started_at=run.fired_at,
        finished_at=run.fired_at + timedelta(seconds=1) if kind != "started" else None,
        reason=reason,
        next_attempt_at=None,
        partition=0,
        offset=0,
    )


def schedules_batch(*changes: ScheduleRow | str) -> ViewBatch:
    """A batch of schedule records in topic order: a row is an upsert, an id a delete."""
    batch = ViewBatch()
    for change in changes:
        if isinstance(change, str):
            batch.delete(change)
        else:
            batch.upsert(change)
    return batch


def ids(shown: list[dict[str, object]]) -> list[str]:
    return [str(s["schedule_id"]) for s in shown]


def test_the_last_record_of_a_schedule_in_a_batch_decides_and_counts_follow(
    view: ConsoleView,
) -> None:
    view.apply(schedules_batch(row("a", 0), row("b", 1), "a", row("c", 1), row("b", 1, owner="x")))
    view.apply(schedules_batch("c", row("a", 0, labels={"tier": "gold"}), "missing"))
    assert ids(queries.list_schedules(view, queries.ScheduleFilter())) == ["a", "b"]
    assert queries.schedules_by_partition(view) == {0: 1, 1: 1}
    assert queries.count_schedules(view) == 2
    assert queries.owners(view) == ["billing", "x"]
    found = queries.schedule(view, "b")
    assert found is not None and found["owner"] == "x"
    gold = queries.ScheduleFilter(label=("tier", "gold"))
    assert ids(queries.list_schedules(view, gold)) == ["a"]
    view.apply(schedules_batch(row("a", 0)))
    assert queries.list_schedules(view, gold) == [], "a new version replaces the labels"


def test_pages_walk_every_schedule_once_whatever_the_filter(view: ConsoleView) -> None:
    view.apply(
        schedules_batch(
            *[
                row(
                    f"team-{n % 3}.job_{n:03d}",
                    n % 4,
                    owner=f"team-{n % 3}",
                    paused=n % 5 == 0,
                    trigger_kind="every" if n % 2 else "cron",
                    labels={"tier": "gold" if n % 7 == 0 else "silver"},
                )
                for n in range(130)
            ]
        )
    )

    def walk(chosen: queries.ScheduleFilter) -> list[str]:
        seen: list[str] = []
        after = ""
        while page := queries.list_schedules(view, chosen, after, limit=50):
            seen += ids(page)
            after = str(page[-1]["schedule_id"])
        return seen

    everything = walk(queries.ScheduleFilter())
    assert len(everything) == 130 and everything == sorted(everything)
    assert len(walk(queries.ScheduleFilter(owner="team-1"))) == 43
    assert len(walk(queries.ScheduleFilter(paused=True))) == 26
    assert len(walk(queries.ScheduleFilter(trigger_kind="every"))) == 65
    assert len(walk(queries.ScheduleFilter(label=("tier", "gold")))) == 19
    # `_` is a literal in a prefix, not a wildcard.
    assert walk(queries.ScheduleFilter(prefix="team-2.job_00")) == [
        "team-2.job_002",
        "team-2.job_005",
        "team-2.job_008",
    ]
    both = queries.ScheduleFilter(owner="team-0", paused=True, label=("tier", "gold"))
    assert walk(both) == ["team-0.job_000", "team-0.job_105"]
    assert queries.owners(view) == ["team-0", "team-1", "team-2"]


def test_a_run_settles_the_same_whatever_order_its_records_arrive_in(view: ConsoleView) -> None:
    run = fired("a", T0, lateness_ms=40)
    retried = fired("b", T0)
    view.apply(ViewBatch(events=[event(run, "succeeded"), event(run, "started")]))
    view.apply(ViewBatch(fired=[run, retried]))
    view.apply(
        ViewBatch(
            events=[
                event(retried, "retrying", reason="exit status 1"),
                event(retried, "started", attempt=2),
                event(retried, "failed", reason="exit status 1"),
            ]
        )
    )
    (shown,) = queries.runs(view, "a")
    assert (shown["status"], shown["attempts"], shown["lateness_ms"]) == ("succeeded", 1, 40)
    (again,) = queries.runs(view, "b")
    assert (again["status"], again["attempts"]) == ("started", 2)


def test_each_first_fire_counts_once_in_its_minute_with_its_lateness(view: ConsoleView) -> None:
    fires = [fired(f"s{n}", T0, lateness_ms=3 if n < 90 else 4_000) for n in range(100)]
    view.apply(ViewBatch(fired=fires[:60]))
    view.apply(ViewBatch(fired=fires[60:], events=[event(fires[0], "dead_lettered")]))
    minute = epoch_ms(T0) // 60_000
    (counted,) = queries.minutes(view, minute, minute + 1)
    assert counted.fires == 100 and counted.dead_lettered == 1
    assert percentile_ms(counted.lateness, 0.5) == 5
    assert percentile_ms(counted.lateness, 0.99) == 5_000


def test_a_batch_that_fails_leaves_neither_its_rows_nor_its_offsets(view: ConsoleView) -> None:
    view.apply(ViewBatch(fired=[fired("a", T0)], offsets={("runs", 0): 1}))
    # Dead letters are written last: the runs before them are undone with them.
    unreadable = DeadLetterRow("dl", 0, 0, "runs", 0, 0, "X", None, 0, None)  # type: ignore[arg-type]
    broken = ViewBatch(fired=[fired("b", T0)], dead_letters=[unreadable], offsets={("runs", 0): 2})
    with pytest.raises(Exception):  # noqa: B017 - the database's own error, either kind
        view.apply(broken)
    view.reconnect()
    assert view.offsets() == {("runs", 0): 1}
    assert queries.runs(view, "b") == []


def test_the_view_survives_reopening_and_a_newer_schema_is_refused(tmp_path: Path) -> None:
    url = f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}"
    first = ConsoleView(url)
    first.apply(ViewBatch(offsets={("s", 0): 7}))
    assert ConsoleView(url).offsets() == {("s", 0): 7}
    with first.connection() as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ViewDatabaseError, match="newer than this console's"):
        ConsoleView(url)


def test_a_view_url_of_another_kind_is_refused_with_the_two_forms() -> None:
    with pytest.raises(ViewDatabaseError, match="neither sqlite:////") as refused:
        ConsoleView("mysql://root:secret@db/kairos")
    assert "secret" not in str(refused.value)


def test_one_console_follows_into_a_view_and_others_only_read_it(
    view: ConsoleView, tmp_path: Path
) -> None:
    second = ConsoleView(view.url)
    assert view.take_follower_lock()
    assert view.take_follower_lock(), "the holder keeps it"
    assert not second.take_follower_lock()


def test_a_change_keeps_the_team_its_header_names_and_a_refusal_marks_it(
    view: ConsoleView,
) -> None:
    created = HistoryEvent("s", 0, 5, "upserted", None, T0, "payments-ci", None, 1)
    forged = HistoryEvent("s", 0, 6, "deleted", None, T0 + timedelta(seconds=1), "x", None, 2)
    refusal = DeadLetterRow(
        "dl", 0, 0, "schedules", 0, 6, "OwnershipRefusedError", "belongs to team 'payments'", 9, "s"
    )
    changes = [
        ChangeRow(created, None, "payments", False),
        ChangeRow(forged, None, "growth", False),
    ]
    view.apply(ViewBatch(changes=changes, dead_letters=[refusal]))
    assert [(c["offset"], c["signing_team"], c["refused"]) for c in queries.changes(view, "s")] == [
        (6, "growth", "belongs to team 'payments'"),
        (5, "payments", None),
    ]


def test_the_held_change_skips_refusals_restorations_and_what_awaits_a_signed_ticker(
    view: ConsoleView,
) -> None:
    """The schedule page shows what the ticker holds (`queries.held_change`), not the latest
    record: a refused change and the ticker's restoration after it are skipped, and in a signed
    partition a change past the committed offset only counts as awaiting."""
    definition = '{"id": "s", "every": "PT1M", "owner": "payments"}'
    hijacked = '{"id": "s", "every": "PT1H", "owner": "payments"}'

    def change(offset: int, by: str) -> HistoryEvent:
        return HistoryEvent("s", 0, offset, "upserted", None, T0, by, None, offset)

    refusal = DeadLetterRow(
        "dl", 0, 0, "schedules", 0, 6, "OwnershipRefusedError", "belongs to team 'payments'", 9, "s"
    )
    rows = [
        ChangeRow(change(5, "alice"), definition, "payments", False),
        ChangeRow(change(6, "growth-ci"), hijacked, "growth", False),
        ChangeRow(change(7, "ticker:t1"), definition, None, True),
        ChangeRow(change(8, "growth-ci"), hijacked, "growth", False),
    ]
    view.apply(ViewBatch(changes=rows, dead_letters=[refusal]))
    held, awaiting = queries.held_change(view, "s", awaiting_from=8)
    assert held is not None and (held["offset"], held["changed_by"], awaiting) == (5, "alice", 1)
    assert held["definition"]["every"] == "PT1M"
    # Open, or not judged yet: every change not refused is taken.
    held, awaiting = queries.held_change(view, "s", awaiting_from=None)
    assert held is not None and (held["offset"], awaiting) == (8, 0)
    assert queries.held_change(view, "other", awaiting_from=None) == (None, 0)


def test_a_view_of_schema_1_gains_the_columns_of_each_later_schema(tmp_path: Path) -> None:
    url = f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}"
    with ConsoleView(url).connection() as db:
        db.execute("DROP TABLE runs")
        db.execute(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, schedule_id TEXT NOT NULL, "
            "nominal_at BIGINT NOT NULL, fired_at BIGINT, lateness_ms BIGINT, ticker TEXT, "
            "status TEXT NOT NULL, attempts INTEGER NOT NULL, executor TEXT, reason TEXT, "
            "finished_at BIGINT)"
        )
        db.execute("INSERT INTO runs VALUES ('r', 's', 0, 0, 0, 't1', 'failed', 1, 'e1', 'x', 1)")
        db.execute("DROP TABLE changes")
        db.execute(
            "CREATE TABLE changes (schedule_id TEXT NOT NULL, partition INTEGER NOT NULL, "
            "at_offset BIGINT NOT NULL, change TEXT NOT NULL, revision INTEGER NOT NULL, "
            "changed_at BIGINT NOT NULL, changed_by TEXT, reason TEXT, definition TEXT, "
            "PRIMARY KEY (schedule_id, partition, at_offset))"
        )
        db.execute("INSERT INTO changes VALUES ('s', 0, 1, 'upserted', 1, 0, 'ci', NULL, NULL)")
        db.execute("DROP TABLE upstreams")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    migrated = ConsoleView(url)
    assert [(c["signing_team"], c["restores"]) for c in queries.changes(migrated, "s")] == [
        (None, False)
    ]
    with migrated.connection() as db:
        assert db.execute("SELECT value FROM meta").fetchone() == ("5",)
        assert db.execute("SELECT count(*) FROM upstreams").fetchone() == (0,)
        # A run read before runs kept their owner: its reason is shown to no team.
        assert db.execute("SELECT owner FROM runs").fetchall() == [(None,)]
