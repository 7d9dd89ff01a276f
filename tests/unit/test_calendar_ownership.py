"""The one verdict on calendar changes (C3): which count in a deployment that enforces ownership.

Every reader of the calendars topic, the tickers included, takes its records through one
`CalendarLedger`; these are its rules case by case, with the signatures' outcomes given as a
reader's check would give them (`kairos.streams.wire.calendar_events`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

import pytest

from kairos.core.business_calendar import BusinessCalendar, parse_calendar
from kairos.core.calendar_ownership import CalendarLedger, calendar_refusal
from kairos.core.calendar_rules import as_of_history
from kairos.core.calendar_versions import (
    KEPT_PROBLEMS,
    CalendarChange,
    CalendarSignature,
    SkippedCalendarRecord,
)
from kairos.core.ownership import Team

T0 = datetime(2027, 3, 1, tzinfo=UTC)
KEY = bytes(32)
TEAMS = {
    "treasury": Team("treasury", (KEY,)),
    "growth": Team("growth", (KEY,)),
    "ops": Team("ops", (KEY,), admin=True),
}
CALENDAR = "us-federal"


def calendar(owner: str, *holidays: date) -> BusinessCalendar:
    return parse_calendar(
        {
            "id": CALENDAR,
            "owner": owner,
            "holidays": [{"date": day, "name": "closed"} for day in holidays],
        }
    )


TREASURY = calendar("treasury", date(2027, 7, 5))
FORGED = calendar("treasury", *(date(2027, 3, 1) + timedelta(days=n) for n in range(400)))


def change(
    version: int,
    new: BusinessCalendar | None,
    signed: str | None,
    refusal: str | None = None,
    *,
    kind: str | None = None,
) -> CalendarChange:
    signature = CalendarSignature(signed, refusal) if signed or refusal else None
    return CalendarChange(
        CALENDAR,
        version,
        kind or ("upserted" if new is not None else "deleted"),
        new,
        T0 + timedelta(minutes=version),
        "someone",
        None,
        signature,
    )


def judged(
    records: Sequence[CalendarChange | SkippedCalendarRecord], signed: bool = True
) -> tuple[CalendarLedger, list[CalendarChange]]:
    ledger = CalendarLedger()
    taken = [c for r in records if (c := ledger.take(r, TEAMS if signed else None))]
    return ledger, taken


def test_open_mode_counts_every_change_whoever_wrote_it() -> None:
    ledger, taken = judged([change(0, TREASURY, None), change(1, FORGED, None)], signed=False)

    assert len(taken) == 2
    version = ledger.book().get(CALENDAR)
    assert version is not None and version.calendar == FORGED and version.signed_by is None


def test_the_owners_signed_creation_and_change_count() -> None:
    edited = calendar("treasury", date(2027, 7, 5), date(2027, 12, 24))
    ledger, taken = judged([change(0, TREASURY, "treasury"), change(1, edited, "treasury")])

    assert [c.version for c in taken] == [0, 1]
    version = ledger.book().get(CALENDAR)
    assert version is not None
    assert (version.calendar, version.version, version.signed_by) == (edited, 1, "treasury")
    assert version.changed_at == T0 + timedelta(minutes=1)
    assert ledger.book().refused == ()


@pytest.mark.parametrize(
    ("attack", "reason", "reported_to"),
    [
        pytest.param(
            change(1, FORGED, None, "unsigned: every change must carry its team's signature"),
            "unsigned",
            None,
            id="unsigned",
        ),
        pytest.param(
            change(1, FORGED, "growth"),
            "calendar 'us-federal' belongs to team 'treasury'; team 'growth' may not change it",
            "growth",
            id="growth-posing-as-treasury",
        ),
        pytest.param(
            change(1, calendar("growth"), "growth"),
            "belongs to team 'treasury'; team 'growth' may not change it",
            "growth",
            id="growth-taking-it-over",
        ),
        pytest.param(
            change(1, None, "growth"),
            "team 'growth' may not delete it",
            "growth",
            id="growth-deleting",
        ),
        pytest.param(
            change(1, None, "growth", kind="tombstone"),
            "team 'growth' may not delete it",
            "growth",
            id="growth-tombstone",
        ),
        pytest.param(
            change(1, FORGED, None, "the signature does not verify with any key of team 'x'"),
            "does not verify",
            None,
            id="forged-signature",
        ),
        pytest.param(
            change(1, TREASURY, "treasury", "signed 900s away from when the broker appended it"),
            "away from when the broker appended it",
            "treasury",
            id="replayed-by-age",
        ),
    ],
)
def test_a_change_not_the_owners_is_refused_and_changes_nothing(
    attack: CalendarChange, reason: str, reported_to: str | None
) -> None:
    ledger, taken = judged([change(0, TREASURY, "treasury"), attack])

    assert [c.version for c in taken] == [0]
    version = ledger.book().get(CALENDAR)
    assert version is not None and version.calendar == TREASURY
    [refused] = ledger.book().refused
    assert (refused.calendar_id, refused.version, refused.team) == (CALENDAR, 1, reported_to)
    assert reason in refused.reason
    assert refused.appended_at == T0 + timedelta(minutes=1)


def test_a_team_creates_only_calendars_it_owns() -> None:
    ledger, _ = judged([change(0, TREASURY, "growth")])

    assert CALENDAR not in ledger.book()
    [refused] = ledger.book().refused
    assert "names owner 'treasury' but team 'growth' signed it" in refused.reason
    assert "set owner: growth" in refused.reason


def test_a_deleted_id_stays_its_last_owners_until_an_administrator_hands_it_on() -> None:
    records = [
        change(0, TREASURY, "treasury"),
        change(1, None, "treasury"),
        change(2, None, None, kind="tombstone"),  # deletes nothing held: taken unsigned
        change(3, calendar("growth"), "growth"),
        change(4, TREASURY, "treasury"),
    ]
    ledger, taken = judged(records)

    assert [c.version for c in taken] == [0, 1, 2, 4]
    [refused] = ledger.book().refused
    assert refused.version == 3
    assert "was team 'treasury''s until it was deleted" in refused.reason

    handed = [*records[:3], change(3, calendar("growth"), "ops"), change(4, FORGED, "treasury")]
    ledger, _ = judged(handed)
    version = ledger.book().get(CALENDAR)
    assert version is not None and version.calendar.owner == "growth"
    assert "belongs to team 'growth'" in ledger.book().refused[0].reason


def test_an_administrator_changes_and_hands_on_any_calendar() -> None:
    to_growth = calendar("growth", date(2027, 7, 5))
    ledger, _ = judged(
        [
            change(0, TREASURY, "treasury"),
            change(1, to_growth, "ops"),
            change(2, calendar("growth"), "growth"),
            change(3, TREASURY, "treasury"),
        ]
    )

    version = ledger.book().get(CALENDAR)
    assert version is not None and (version.version, version.signed_by) == (2, "growth")
    [refused] = ledger.book().refused
    assert refused.version == 3 and "belongs to team 'growth'" in refused.reason


def test_a_team_does_not_hand_its_own_calendar_to_another() -> None:
    reason = calendar_refusal(TEAMS["treasury"], CALENDAR, TREASURY, calendar("growth"), None)
    assert reason is not None and "an administrators' team hands a calendar" in reason


def test_a_team_no_longer_registered_is_refused() -> None:
    ledger, _ = judged([change(0, calendar("gone"), "gone")])
    assert "which is not registered" in ledger.book().refused[0].reason


def test_a_record_read_without_its_signature_checked_never_counts_when_signed() -> None:
    ledger, _ = judged([change(0, TREASURY, None)])
    assert "not checked" in ledger.book().refused[0].reason


def test_skipped_records_are_kept_and_change_nothing() -> None:
    ledger, taken = judged([change(0, TREASURY, "treasury"), SkippedCalendarRecord(1, "bad")])

    assert len(taken) == 1
    assert ledger.book().skipped == (SkippedCalendarRecord(1, "bad"),)


def test_a_flood_of_refused_and_unreadable_records_keeps_only_the_latest_and_counts_all() -> None:
    """A ticker follows the calendars topic for as long as it runs: what a team publishes that
    never counts must not grow it."""
    flood = KEPT_PROBLEMS + 5
    attacks = [change(n, FORGED, "growth") for n in range(1, flood + 1)]
    unreadable = [SkippedCalendarRecord(flood + n, "bad") for n in range(1, flood + 1)]
    ledger, taken = judged([change(0, TREASURY, "treasury"), *attacks, *unreadable])

    assert [c.version for c in taken] == [0]
    book = ledger.book()
    assert (book.refused_count, book.skipped_count) == (flood, flood)
    assert len(book.refused) == len(book.skipped) == KEPT_PROBLEMS
    assert book.refused[-1].version == flood and book.skipped[-1].version == 2 * flood


def test_the_audits_history_holds_only_what_counted_by_the_append_time() -> None:
    """C3's reproduction: growth's 400 holidays from March 1 are refused, so the version in force
    through March is treasury's, whatever growth's record said; a version counts from when the
    broker appended it (its `changed_at` here), not before."""
    _, taken = judged([change(0, TREASURY, "treasury"), change(1, FORGED, "growth")])
    lookup = as_of_history(taken)

    assert lookup(CALENDAR, T0 - timedelta(seconds=1)) is None
    for day in range(31):
        found = lookup(CALENDAR, T0 + timedelta(days=day))
        assert found is not None and found.calendar == TREASURY and found.version == 0
