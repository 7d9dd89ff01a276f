"""The herd encoder writes exactly the bytes the codec writes, for any run."""

from __future__ import annotations

import gc
import weakref
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.definitions import ANONYMOUS_ID
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch
from kairos.core.upstream_wait import Resolution, UpstreamPeriod
from kairos.streams.state.changelog import progress_record
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import run_requested_record
from kairos.streams.wire.run_encoder import ProgressEncoder, RunRequestedEncoder, _long

CODEC = make_codecs().run_requested
instants = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))


@settings(max_examples=300, deadline=None)
@given(
    schedule_id=st.from_regex(r"[A-Za-z0-9._:/-]{1,40}", fullmatch=True),
    nominal=instants,
    jitter_ms=st.integers(0, 10**7),
    lateness_ms=st.integers(-5_000, 10**9),
    partition=st.integers(0, 10_000),
    version=st.integers(0, 2**40),
    owner=st.none() | st.text(max_size=20),
    runs=st.integers(1, 3),
    prepared=st.booleans(),
)
def test_encoder_matches_the_codec_byte_for_byte(
    schedule_id: str,
    nominal: datetime,
    jitter_ms: int,
    lateness_ms: int,
    partition: int,
    version: int,
    owner: str | None,
    runs: int,
    prepared: bool,
) -> None:
    schedule = Schedule(id=schedule_id, cron="* * * * *", owner=owner)
    state = ScheduleState(schedule=schedule, version=version, next_nominal=nominal)
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    # Several runs of one schedule version: the first builds the template, the rest reuse it.
    for n in range(runs):
        at = nominal + timedelta(minutes=n)
        due = at + timedelta(milliseconds=jitter_ms)
        fired = due + timedelta(milliseconds=lateness_ms)
        decision = Decision(run_id(schedule_id, at), schedule_id, at, due, Action.FIRE)
        if prepared:
            encoder.prepare(state, partition, decision)
        expected = CODEC.encode(
            run_requested_record(
                decision, state, fired_at=fired, partition=partition, ticker_instance="ticker-1"
            )
        )
        assert encoder.encode(decision, state, fired_at=fired, partition=partition) == expected


@settings(max_examples=200, deadline=None)
@given(
    schedule_id=st.from_regex(r"[A-Za-z0-9._:/-]{1,40}", fullmatch=True),
    version=st.integers(0, 2**40),
    last=st.none() | instants,
    following=st.none() | instants,
    settle_before=st.none() | instants,
    runs_fired=st.integers(0, 2**31),
    waiting=st.lists(instants, max_size=70),
)
def test_progress_encoder_matches_the_codec_byte_for_byte(
    schedule_id: str,
    version: int,
    last: datetime | None,
    following: datetime | None,
    settle_before: datetime | None,
    runs_fired: int,
    waiting: list[datetime],
) -> None:
    codec = make_codecs().ticker_progress
    state = ScheduleState(
        schedule=Schedule(id=schedule_id, cron="* * * * *"),
        version=version,
        next_nominal=following,
        runs_fired=runs_fired,
        last_decided_nominal=last,
        settle_before=settle_before,
        waiting=tuple(sorted(waiting)),
    )
    assert ProgressEncoder(codec).encode(state) == codec.encode(progress_record(state))


@pytest.mark.parametrize("upcoming", [False, True], ids=["definition", "definition-and-run"])
def test_a_fire_prepared_ahead_encodes_exactly(upcoming: bool) -> None:
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    state = ScheduleState(
        schedule=Schedule(id="herd-1", cron="* * * * *"), version=7, next_nominal=nominal
    )
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    decision = Decision(run_id("herd-1", nominal), "herd-1", nominal, nominal, Action.FIRE)
    encoder.prepare(state, 3, decision if upcoming else None)
    fired = nominal + timedelta(milliseconds=12)
    expected = CODEC.encode(
        run_requested_record(
            decision, state, fired_at=fired, partition=3, ticker_instance="ticker-1"
        )
    )
    assert encoder.encode(decision, state, fired_at=fired, partition=3) == expected


def test_a_run_prepared_ahead_is_reused_only_for_that_very_decision() -> None:
    """A calendar changed after preparing moves the same run id to another due instant: the
    run carries the instant decided at the fire, not the one prepared."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    state = ScheduleState(
        schedule=Schedule(id="herd-1", cron="* * * * *"), version=7, next_nominal=nominal
    )
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    prepared = Decision(run_id("herd-1", nominal), "herd-1", nominal, nominal, Action.FIRE)
    encoder.prepare(state, 3, prepared)
    moved_to = nominal + timedelta(days=1)
    moved = Decision(prepared.run_id, "herd-1", nominal, moved_to, Action.FIRE, moved_to=moved_to)
    fired = moved_to + timedelta(milliseconds=5)
    for decision in (moved, prepared):
        expected = CODEC.encode(
            run_requested_record(
                decision, state, fired_at=fired, partition=3, ticker_instance="ticker-1"
            )
        )
        assert encoder.encode(decision, state, fired_at=fired, partition=3) == expected


def test_a_definitions_bytes_serve_only_the_partition_they_were_built_for() -> None:
    """A run on another partition (the topic's partition count changed) is encoded for that
    partition, not from the bytes of the old one."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    state = ScheduleState(
        schedule=Schedule(id="herd-1", cron="* * * * *"), version=7, next_nominal=nominal
    )
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    decision = Decision(run_id("herd-1", nominal), "herd-1", nominal, nominal, Action.FIRE)
    for partition in (3, 4, 3):
        encoder.prepare(state, partition, decision)
        expected = CODEC.encode(
            run_requested_record(
                decision, state, fired_at=nominal, partition=partition, ticker_instance="ticker-1"
            )
        )
        assert encoder.encode(decision, state, fired_at=nominal, partition=partition) == expected


def test_schedules_of_one_definition_share_their_runs_bytes() -> None:
    """Nothing is kept per schedule: the schedules of one definition (one object, shared by
    their states) share the bytes of their runs, each run carrying its own id and offset."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    job = {"kind": "http", "url": "https://billing.internal/settle"}
    states = [
        ScheduleState(
            schedule=Schedule.model_validate(
                {"id": f"settle-{n}", "cron": "* * * * *", "job": job}
            ),
            version=1_000 + n,
            next_nominal=nominal,
        )
        for n in range(50)
    ]
    for state in states:
        decision = Decision(
            run_id(state.schedule_id, nominal), state.schedule_id, nominal, nominal, Action.FIRE
        )
        expected = CODEC.encode(
            run_requested_record(
                decision, state, fired_at=nominal, partition=3, ticker_instance="ticker-1"
            )
        )
        assert encoder.encode(decision, state, fired_at=nominal, partition=3) == expected
    assert len({id(state.schedule) for state in states}) == 1
    assert len(encoder._parts) == 1


def test_a_job_parameter_holding_the_bytes_around_the_offset_still_encodes_exactly() -> None:
    """Partition 40, offset 50 and a 52-character ticker name encode as `Pdh` and the name:
    a job parameter holding that text comes first in the run and is where the cut falls."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    ticker = "x" * 52
    encoder = RunRequestedEncoder(CODEC, ticker)
    job = {"kind": "shell", "command": "Pdh" + ticker}
    schedule = Schedule.model_validate({"id": "odd", "cron": "* * * * *", "job": job})
    state = ScheduleState(schedule=schedule, version=50, next_nominal=nominal)
    for minute in range(2):
        at = nominal + timedelta(minutes=minute)
        decision = Decision(run_id("odd", at), "odd", at, at, Action.FIRE)
        expected = CODEC.encode(
            run_requested_record(decision, state, fired_at=at, partition=40, ticker_instance=ticker)
        )
        assert encoder.encode(decision, state, fired_at=at, partition=40) == expected


def test_schedules_of_one_definition_whose_job_holds_an_offsets_bytes_encode_exactly() -> None:
    """The bytes shared by a definition's schedules hold no schedule's offset, even where a
    job parameter holds the bytes an offset is written in, next to the partition's and the
    ticker's: offsets 50 and 51 (`d`, `f`) on partition 40 (`P`)."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    ticker = "x" * 52
    encoder = RunRequestedEncoder(CODEC, ticker)
    job = {"kind": "shell", "command": "Pdh" + ticker}
    for schedule_id, version in (("odd-1", 50), ("odd-2", 51), ("odd-3", 2**40)):
        schedule = Schedule.model_validate({"id": schedule_id, "cron": "* * * * *", "job": job})
        state = ScheduleState(schedule=schedule, version=version, next_nominal=nominal)
        decision = Decision(
            run_id(schedule_id, nominal), schedule_id, nominal, nominal, Action.FIRE
        )
        expected = CODEC.encode(
            run_requested_record(
                decision, state, fired_at=nominal, partition=40, ticker_instance=ticker
            )
        )
        assert encoder.encode(decision, state, fired_at=nominal, partition=40) == expected


@given(st.integers(-(2**63), 2**63 - 1))
def test_an_offset_with_its_lowest_bit_flipped_differs_in_its_first_byte_alone_in_length(
    offset: int,
) -> None:
    """What the encoder finds the offset's place by (`_build_parts`)."""
    encoded, flipped = _long(offset), _long(offset ^ 1)
    assert len(flipped) == len(encoded)
    assert flipped[0] != encoded[0]


def test_a_definitions_bytes_go_with_it() -> None:
    """The encoder keeps no definition alive: a state dropped from memory (not due soon, or
    deleted) takes its definition's bytes with it, where no other state shares them."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    definition = Schedule(id="gone", cron="* * * * *").model_copy(update={"id": ANONYMOUS_ID})
    state = ScheduleState(schedule=definition, version=1, next_nominal=nominal, schedule_id="gone")
    encoder.prepare(state, 3, None)
    assert len(encoder._parts) == 1
    del state, definition
    gc.collect()
    assert len(encoder._parts) == 0


def test_a_dropped_encoder_is_freed_at_once() -> None:
    """Its definitions' callbacks hold it weakly: a session rebuilt after an aborted
    transaction drops its encoder, and the fires it prepared ahead go with it, not at the
    cyclic collector's next full pass (which a busy ticker defers for minutes)."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    state = ScheduleState(Schedule(id="kept", cron="* * * * *"), 1, nominal)
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    encoder.prepare(state, 3, None)
    dropped = weakref.ref(encoder)
    gc.disable()
    try:
        del encoder
        assert dropped() is None
    finally:
        gc.enable()


labels = st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(max_size=30), labels, st.integers(0, 2**62), st.integers(0, 500)),
        min_size=1,
        max_size=6,
    )
)
def test_one_encoder_encodes_runs_of_any_definitions_exactly(
    runs: list[tuple[str, dict[str, str], int, int]],
) -> None:
    """Definitions with any job text and labels, several of them equal, through one encoder."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    encoder = RunRequestedEncoder(CODEC, "ticker-1")
    for n, (command, run_labels, version, partition) in enumerate(runs):
        schedule_id = f"any-{n}"
        schedule = Schedule.model_validate(
            {
                "id": schedule_id,
                "cron": "* * * * *",
                "job": {"kind": "shell", "command": command or "x"},
                "labels": run_labels,
            }
        )
        state = ScheduleState(schedule=schedule, version=version, next_nominal=nominal)
        decision = Decision(
            run_id(schedule_id, nominal), schedule_id, nominal, nominal, Action.FIRE
        )
        expected = CODEC.encode(
            run_requested_record(
                decision, state, fired_at=nominal, partition=partition, ticker_instance="ticker-1"
            )
        )
        assert encoder.encode(decision, state, fired_at=nominal, partition=partition) == expected


def test_a_run_of_a_waiting_schedule_carries_the_periods_its_resolver_gave() -> None:
    nominal = datetime(2027, 1, 1, 7, tzinfo=UTC)
    period = UpstreamPeriod("settle", PeriodMatch.SAME_LOCAL_DATE, Resolution.MATCHED, nominal)
    asked: list[tuple[str, datetime | None]] = []

    class Resolver:
        def expect(self, schedule: Schedule) -> None:
            asked.extend((upstream.schedule, None) for upstream in schedule.upstream)

        def upstream_periods(
            self, decision: Decision, state: ScheduleState
        ) -> list[UpstreamPeriod]:
            asked.append((state.schedule_id, decision.nominal))
            return [period]

    encoder = RunRequestedEncoder(CODEC, "ticker-1", Resolver())
    schedule = Schedule.model_validate(
        {
            "id": "export",
            "cron": "0 7 * * *",
            "owner": "ledger",
            "upstream": [{"schedule": "settle", "match": "same_local_date"}],
            "upstream_wait": "2h",
            "upstream_timeout": "skip",
        }
    )
    state = ScheduleState(schedule, 4, nominal)
    decision = Decision(run_id("export", nominal), "export", nominal, nominal, Action.FIRE)
    encoder.prepare(state, 1, decision)

    encoded = encoder.encode(decision, state, fired_at=nominal, partition=1)

    record = CODEC.decode(encoded)
    plain = run_requested_record(
        decision, state, fired_at=nominal, partition=1, ticker_instance="ticker-1",
        upstream=[period],
    )  # fmt: skip
    assert encoded == CODEC.encode(plain)
    # Expected ahead, in idle time (the upstream's partition read then, off the loop), and
    # resolved at the fire, from the definitions as the book then holds them.
    assert asked == [("settle", None), ("export", nominal)]
    assert record["upstream"] == [
        {"schedule_id": "settle", "match": "same_local_date", "resolution": "matched",
         "period_at": nominal, "reason": None}
    ]  # fmt: skip
    assert (record["upstream_wait_ms"], record["upstream_timeout"]) == (7_200_000, "skip")
    assert record["interval_start"] == nominal - timedelta(days=1)
