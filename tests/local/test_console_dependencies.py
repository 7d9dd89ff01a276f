"""A schedule's page shows what it waits for, with the state of its current period, and what
waits for it: from the view, on SQLite and PostgreSQL, through the view's own follower rows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from kairos.core.schedule import Schedule
from kairos.services.console import queries
from kairos.services.console.dependencies import dependencies
from kairos.services.console.view import ConsoleView, ViewBatch
from tests.local.test_console_view import T0, event, fired, row, schedules_batch, view

__all__ = ["view"]  # the fixture, over both databases

SETTLE = {"id": "payments.settle", "cron": "0 7 * * *", "owner": "payments",
          "downstream_teams": ["ledger"]}  # fmt: skip
EXPORT = {"id": "ledger.export", "cron": "0 7 * * *", "owner": "ledger",
          "upstream": [{"schedule": "payments.settle", "match": "same_instant"}]}  # fmt: skip


def _held(view: ConsoleView) -> Callable[[str], Schedule | None]:
    """The view's latest definitions, as an open deployment's tickers hold them."""

    def held(schedule_id: str) -> Schedule | None:
        found = queries.schedule(view, schedule_id)
        return None if found is None else Schedule.model_validate(found["definition"])

    return held


def _rows(view: ConsoleView) -> None:
    settle, export = Schedule.model_validate(SETTLE), Schedule.model_validate(EXPORT)
    view.apply(
        schedules_batch(
            row("payments.settle", owner="payments", definition=settle.model_dump_json()),
            row("ledger.export", owner="ledger", definition=export.model_dump_json(),
                upstream=("payments.settle",)),
        )
    )  # fmt: skip


def test_the_page_shows_the_current_periods_upstream_state_and_who_waits(
    view: ConsoleView,
) -> None:
    _rows(view)
    export = Schedule.model_validate(EXPORT)
    now = T0 + timedelta(minutes=5)

    before = dependencies(view, export, now, _held(view))
    assert before["current_period"] == "2027-03-14T07:00:00Z"
    assert before["waits_for"] == [
        {"schedule": "payments.settle", "match": "same_instant",
         "period_at": "2027-03-14T07:00:00Z", "state": "not run yet"}
    ]  # fmt: skip

    settled = fired("payments.settle", T0)
    view.apply(ViewBatch(fired=[settled], events=[event(settled, "succeeded")]))
    assert dependencies(view, export, now, _held(view))["waits_for"][0]["state"] == "succeeded"
    upstream = dependencies(view, Schedule.model_validate(SETTLE), now, _held(view))
    assert upstream["waits_for"] == [] and upstream["waited_for_by"] == ["ledger.export"]


def test_an_upstream_gone_or_not_granting_is_shown_with_the_reason(view: ConsoleView) -> None:
    _rows(view)
    stranger = Schedule.model_validate({**EXPORT, "id": "ops.export", "owner": "ops"})
    gone = Schedule.model_validate({**EXPORT, "upstream": [{"schedule": "payments.gone"}]})
    now = T0 + timedelta(minutes=5)

    (refused,) = dependencies(view, stranger, now, _held(view))["waits_for"]
    (missing,) = dependencies(view, gone, now, _held(view))["waits_for"]
    assert refused["state"] == "refused" and "adds ops to its downstream_teams" in refused["reason"]
    assert missing["state"] == "refused" and "does not exist" in missing["reason"]
    view.apply(schedules_batch("ledger.export"))
    settle = Schedule.model_validate(SETTLE)
    assert dependencies(view, settle, now, _held(view))["waited_for_by"] == []
