"""A calendar change forgets only the decoded states of the schedules naming it (C3): real
partition stores, the ticker's calendars followed from a feed that answers one read after
another, as the calendars topic would."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from kairos.core.business_calendar import parse_calendar
from kairos.core.calendar_versions import CalendarBook, CalendarVersion, RefusedCalendarChange
from kairos.core.firing import ScheduleState
from kairos.core.ownership import Team
from kairos.core.schedule import Schedule
from kairos.services.ticker import calendar_feed
from kairos.services.ticker.calendar_feed import TickerCalendars
from kairos.services.ticker.partition import OwnedPartition
from kairos.streams.readers.calendar_ownership import SignedCalendars
from kairos.streams.state.changelog import StateWriteEncoder
from kairos.streams.state.state_store import PartitionStore, StoreMemory
from kairos.streams.wire.codec import make_codecs

CODECS = make_codecs()
T0 = datetime(2027, 7, 1, 9, tzinfo=UTC)
TEAMS = {"treasury": Team("treasury", (bytes(32),))}
BY_PARTITION = [
    [
        Schedule(id="payments.settle", cron="0 9 * * *", start_at=T0, exclude=("us-federal",)),
        Schedule(id="growth.report", cron="0 9 * * *", start_at=T0),
    ],
    [
        Schedule(id="ops.deploy", cron="0 9 * * *", start_at=T0, blackout=("freeze",)),
        Schedule(id="growth.other", cron="0 9 * * *", start_at=T0, exclude=("emea",)),
    ],
]


def version(calendar_id: str, offset: int, *holidays: date) -> CalendarVersion:
    calendar = parse_calendar(
        {
            "id": calendar_id,
            "owner": "treasury",
            "holidays": [{"date": day, "name": "Independence Day"} for day in holidays],
        }
    )
    return CalendarVersion(calendar, offset, T0, "treasury", signed_by="treasury")


FIRST = {
    "us-federal": version("us-federal", 1),
    "freeze": version("freeze", 2),
    "emea": version("emea", 3),
}
FORGED = RefusedCalendarChange(
    "emea", 6, "calendar 'emea' belongs to team 'treasury'", "growth", T0
)


class Published:
    """The calendars topic's reads, scripted: each `refresh` answers the next book."""

    topic = "calendars"

    def __init__(self, *books: CalendarBook) -> None:
        self._books = list(books)
        self.judged_with: list[SignedCalendars | None] = []

    def refresh(
        self, timeout_s: float | None = None, signed: SignedCalendars | None = None
    ) -> CalendarBook:
        self.judged_with.append(signed)
        return self._books.pop(0)

    def close(self) -> None:
        """Nothing held."""


@pytest.fixture
def calendars(monkeypatch: pytest.MonkeyPatch) -> TickerCalendars:
    monkeypatch.setattr(calendar_feed, "REFRESH_S", 0.0)
    return TickerCalendars(lambda: TEAMS)


@pytest.fixture
def partitions(tmp_path: Path, calendars: TickerCalendars) -> Iterator[list[OwnedPartition]]:
    owned = []
    encoder = StateWriteEncoder(CODECS)
    for number, schedules in enumerate(BY_PARTITION):
        store = PartitionStore(tmp_path / f"p{number}", StoreMemory(16))
        writes = [
            encoder.state_write(s.id, ScheduleState(s, version=1, next_nominal=T0), True)
            for s in schedules
        ]
        store.apply(writes, 1)
        owned.append(OwnedPartition(number, store, CODECS, T0, calendars.lookup))
    yield owned
    for one in owned:
        one.store.close()


def test_a_calendar_change_forgets_only_the_states_of_the_schedules_naming_it(
    calendars: TickerCalendars,
    partitions: list[OwnedPartition],
    caplog: pytest.LogCaptureFixture,
) -> None:
    changed = {**FIRST, "us-federal": version("us-federal", 5, date(2027, 7, 1))}
    feed = Published(
        CalendarBook(FIRST),
        CalendarBook(FIRST, refused=(FORGED,), refused_count=1),
        CalendarBook(changed, refused=(FORGED,), refused_count=1),
    )
    calendars.start(feed)
    decoded = {
        s.id: partitions[n].state(s.id) for n, group in enumerate(BY_PARTITION) for s in group
    }
    settle = decoded["payments.settle"]
    assert settle is not None and settle.verdict.skip_reason is None

    with caplog.at_level(logging.WARNING, logger=calendar_feed.__name__):
        calendars.follow(partitions)  # growth's forgery of emea, refused: nothing forgotten
    assert all(
        partitions[n].state(s.id) is decoded[s.id] for n, g in enumerate(BY_PARTITION) for s in g
    )
    assert [r.getMessage() for r in caplog.records] == [
        "calendar change refused: calendar emea at version 6 (signed by team growth): "
        "calendar 'emea' belongs to team 'treasury'"
    ]

    calendars.follow(partitions)  # treasury's change of us-federal
    again = partitions[0].state("payments.settle")
    assert again is not settle and again is not None
    assert again.verdict.skip_reason == "2027-07-01 is 'Independence Day' in calendar us-federal v5"
    for schedule_id in ("growth.report", "ops.deploy", "growth.other"):
        number = 0 if schedule_id == "growth.report" else 1
        assert partitions[number].state(schedule_id) is decoded[schedule_id], schedule_id
    # The teams' keys are made into a checker once, and again only when the teams change.
    assert len({id(signed) for signed in feed.judged_with}) == 1
    assert feed.judged_with[0] is not None and feed.judged_with[0].teams is TEAMS
