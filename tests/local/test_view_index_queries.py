"""`--view` reads the console's view, on SQLite and PostgreSQL alike: a schedule's last runs and
what a deadline judges, filtered by schedule or not, and nothing written to open it."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from kairos.cli.view_index import last_runs, late_inputs, open_view
from kairos.core.errors import KairosError
from kairos.services.console.view import ConsoleView, ViewBatch
from tests.local.test_console_view import T0, event, fired, view

__all__ = ["view"]  # the fixture, over both databases
MINUTE = timedelta(minutes=1)


def _history(view: ConsoleView) -> None:
    first, second, other = fired("a", T0), fired("a", T0 + MINUTE), fired("b", T0)
    skipped = fired("a", T0 + 2 * MINUTE)
    view.apply(
        ViewBatch(
            fired=[first, second, other],
            events=[
                event(first, "started"),
                event(first, "succeeded"),
                event(second, "deadline_missed", reason="start_by 1m: not started by ..."),
                event(skipped, "skipped", attempt=0, reason="misfire"),
                # An event whose fire the view has not read yet: no run to show.
                event(fired("a", T0 + 3 * MINUTE), "started"),
            ],
        )
    )


def test_the_view_answers_what_a_deadline_judges_for_all_schedules_or_one(
    view: ConsoleView,
) -> None:
    _history(view)
    runs, misses = late_inputs(view, T0, None)
    assert sorted(r.run_id for r in runs) == sorted(
        [fired("a", T0).run_id, fired("a", T0 + MINUTE).run_id, fired("b", T0).run_id]
    )
    started = {r.run_id: r.first_start for r in runs}
    assert started[fired("a", T0).run_id] == fired("a", T0).fired_at
    assert [m.run_id for m in misses] == [fired("a", T0 + MINUTE).run_id]
    only_b, none = late_inputs(view, T0, "b")
    assert [r.run_id for r in only_b] == [fired("b", T0).run_id] and none == []
    later, _ = late_inputs(view, T0 + MINUTE, "a")
    assert [r.run_id for r in later] == [fired("a", T0 + MINUTE).run_id]


def test_the_last_runs_are_the_fired_and_skipped_ones_oldest_first(view: ConsoleView) -> None:
    _history(view)
    shown = last_runs(view, "a", 5)
    assert [(r["run_id"], r["status"], r["commits"]) for r in shown] == [
        (fired("a", T0).run_id, "succeeded", 1),
        (fired("a", T0 + MINUTE).run_id, "deadline_missed", 1),
        (fired("a", T0 + 2 * MINUTE).run_id, "skipped", 0),
    ]
    assert [r["run_id"] for r in last_runs(view, "a", 2)] == [r["run_id"] for r in shown[1:]]


def test_opening_to_read_needs_a_view_and_writes_nothing(view: ConsoleView, tmp_path: Path) -> None:
    assert ConsoleView(view.url, create=False).url == view.url
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    with pytest.raises(KairosError, match="no console view there"):
        open_view(f"sqlite:///{empty}")
    with sqlite3.connect(empty) as untouched:
        assert untouched.execute("SELECT name FROM sqlite_master").fetchall() == []
