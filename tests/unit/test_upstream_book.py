"""The ticker's book of upstream definitions: one read a partition, failures kept from the fire,
forgotten upstreams no longer read."""

from __future__ import annotations

from datetime import UTC, datetime

from kairos.core.errors import KairosError
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.core.upstream_wait import Resolution, Unreadable
from kairos.services.ticker.upstream_book import FORGET_S, RECENT_S, PartitionRead, UpstreamBook
from tests.helpers import eventually

T0 = datetime(2027, 3, 15, 7, 0, tzinfo=UTC)
SETTLE = Schedule.model_validate(
    {"id": "settle", "cron": "0 7 * * *", "owner": "payments", "downstream_teams": ["ledger"]}
)


class Partitions:
    """Two partitions: ids starting with `a` on 0, the rest on 1; every read counted."""

    def __init__(self) -> None:
        self.schedules = {"settle": SETTLE}
        self.reads: list[int] = []
        self.failing = False

    def __call__(self, schedule_id: str) -> PartitionRead:
        partition = placement(schedule_id, 2)
        self.reads.append(partition)
        if self.failing:
            raise KairosError("the broker is down")
        found = {k: v for k, v in self.schedules.items() if (k.startswith("a")) == (partition == 0)}
        return PartitionRead(partition, found, 2)


def placement(schedule_id: str, _partitions: int) -> int:
    return 0 if schedule_id.startswith("a") else 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_upstreams_first_asked_together_on_one_partition_cost_one_read() -> None:
    partitions, clock = Partitions(), Clock()
    book = UpstreamBook(partitions, clock=clock, placement=placement)

    assert book.definition("settle") == SETTLE
    assert book.definition("made-up-1") is None
    assert book.definition("made-up-2") is None
    assert book.definition("settle") == SETTLE
    assert partitions.reads == [1]
    clock.now += RECENT_S
    assert book.definition("made-up-3") is None
    assert partitions.reads == [1, 1]


def test_the_refresh_reads_each_partition_once_and_forgets_what_no_run_asks_for() -> None:
    partitions, clock = Partitions(), Clock()
    book = UpstreamBook(partitions, clock=clock, placement=placement)
    for schedule_id in ("settle", "b-other", "a-one", "a-two"):
        book.definition(schedule_id)
    partitions.reads.clear()
    partitions.schedules = {"settle": SETTLE.model_copy(update={"downstream_teams": ()})}

    assert sorted(book._one_id_per_partition()) == ["a-one", "settle"]
    clock.now += FORGET_S + 1
    book.definition("settle")
    assert book._one_id_per_partition() == ["settle"]


def test_an_unreadable_upstream_is_answered_so_and_nothing_raises_into_the_fire() -> None:
    partitions = Partitions()
    partitions.failing = True
    book = UpstreamBook(partitions, clock=Clock(), placement=placement)
    export = Schedule.model_validate(
        {"id": "export", "cron": "0 7 * * *", "owner": "ledger",
         "upstream": [{"schedule": "settle", "match": "same_instant"}]}
    )  # fmt: skip
    decision = Decision(run_id("export", T0), "export", T0, T0, Action.FIRE)

    assert isinstance(book.definition("settle"), Unreadable)
    (period,) = book.upstream_periods(decision, ScheduleState(export, 0, T0))
    assert period.resolution is Resolution.REFUSED
    assert "could not be read when the run was fired (the broker is down)" in str(period.reason)
    partitions.failing = False
    (period,) = book.upstream_periods(decision, ScheduleState(export, 0, T0))
    assert period.resolution is Resolution.MATCHED and period.period_at == T0


def _waiting_for(*upstreams: str) -> Schedule:
    return Schedule.model_validate(
        {"id": "export", "cron": "0 7 * * *", "owner": "ledger",
         "upstream": [{"schedule": u} for u in upstreams]}
    )  # fmt: skip


def test_a_fire_prepared_ahead_has_its_upstreams_read_off_the_tickers_loop() -> None:
    partitions = Partitions()
    book = UpstreamBook(partitions, clock=Clock(), placement=placement)

    book.expect(_waiting_for("settle", "b-other", "a-one"))
    assert partitions.reads == []  # the loop never waits for another partition's read
    book.read_expected()
    assert sorted(partitions.reads) == [0, 1]
    assert book.definition("settle") == SETTLE
    assert book.definition("a-one") is None
    assert sorted(partitions.reads) == [0, 1]  # the fire answered from memory


def test_the_books_thread_reads_what_is_expected_as_it_comes() -> None:
    partitions = Partitions()
    book = UpstreamBook(partitions, refresh_s=3600)
    book.start()
    try:
        book.expect(_waiting_for("settle"))
        eventually(lambda: partitions.reads == [1], timeout_s=10, interval_s=0.01)
    finally:
        book.close()
    assert book.definition("settle") == SETTLE
    assert partitions.reads == [1]
