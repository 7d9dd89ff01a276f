"""Over the whole space of schedules: each is refused at validation or decided without error.

A schedule the model accepts is decided by every ticker that reads it, so nothing downstream may
raise for it: creating its state, deciding it due or ahead at any `now` up to the far future,
settling it on an edit or a delete, and carrying it through the Avro records of the schedules
topic, the changelog and the runs topic. Draws lean on the edges: instants and durations at and
beyond their bounds, every zone the host knows, every cron form, every policy.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import available_timezones

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kairos.core import limits
from kairos.core.audit import HistoryEvent, expected_occurrences
from kairos.core.calendar import never_fires_reason, next_fires
from kairos.core.cron_syntax import MACROS
from kairos.core.firing import (
    Action,
    Outcome,
    ScheduleState,
    decide_ahead,
    decide_due,
    deleted,
    holds_at,
    upserted,
)
from kairos.core.retry import after_failure
from kairos.core.schedule import (
    DstGapPolicy,
    DstRepeatPolicy,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    SchedulesInvalidError,
    parse_schedule,
)
from kairos.streams.state.changelog import progress_record, state_from_records, state_record
from kairos.streams.wire.avro_schemas import RecordType
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import (
    definition_record,
    run_requested_record,
    schedule_from_definition,
)
from kairos.streams.wire.run_encoder import RunRequestedEncoder
from tests.unit.test_avro_writer import same_bytes_as_fastavro

CODECS = make_codecs()
MS = timedelta(milliseconds=1)
DAY = timedelta(days=1)
ZONES = sorted(available_timezones())
HOSTILE_ZONES = [
    "localtime",
    "posixrules",
    "Factory",
    "right/UTC",
    "posix/Europe/Berlin",
    "../../etc/passwd",
    "/etc/localtime",
    "",
    "EST",
]

# Milliseconds at and around every bound the model states, and far beyond them.
_EDGES_MS = sorted(
    {
        edge // MS + delta
        for edge in (
            timedelta(0),
            limits.SHORTEST_EVERY,
            limits.LONGEST_EVERY,
            limits.LONGEST_CALENDAR_JITTER,
            limits.LONGEST_CATCHUP_WINDOW,
            limits.LONGEST_TIMEOUT,
            limits.LONGEST_RETRY_BACKOFF,
            timedelta(days=36_500),
        )
        for delta in (-1, 0, 1)
    }
    | {2**31, 2**62, 2**63 - 1, 10**20}
)


def mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` nine times in ten: most draws must pass validation to test what follows it."""
    return st.sampled_from([False] * 9 + [True]).flatmap(lambda odd: rare if odd else usual)


def durations_ms(longest: timedelta, shortest: timedelta = timedelta(0)) -> st.SearchStrategy[int]:
    """Milliseconds, mostly within [shortest, longest] and near its ends, at times at any edge."""
    low, high = shortest // MS, longest // MS
    within = st.one_of(
        st.integers(low, min(high, low + 10**5)),
        st.integers(low, high),
        st.integers(max(low, high - 10**5), high),
    )
    return mostly(within, st.sampled_from(_EDGES_MS))


def _instant(ms: int) -> datetime:
    return limits.EARLIEST_INSTANT + timedelta(milliseconds=ms)


_SPAN_MS = (limits.LATEST_INSTANT - limits.EARLIEST_INSTANT) // MS
in_range = st.one_of(
    st.integers(0, 3 * 86_400_000).map(_instant),
    st.integers(_SPAN_MS - 3 * 86_400_000, _SPAN_MS - 1).map(_instant),
    st.integers(0, _SPAN_MS - 1).map(_instant),
    st.integers(1_700_000_000_000, 1_900_000_000_000).map(_instant),
)
out_of_range = st.sampled_from(
    [
        datetime(1, 1, 1, tzinfo=UTC),
        limits.EARLIEST_INSTANT - MS,
        limits.LATEST_INSTANT,
        datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC),
    ]
)
instants = mostly(in_range, out_of_range)
"""Instants near both bounds, anywhere, in this century, and at times out of range."""
offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timedelta(minutes=minutes))


def written(draw: st.DrawFn, instant: datetime) -> str:
    """The instant as a schedules file writes it: ISO-8601 at some offset."""
    offset = draw(offsets)
    sign = "-" if offset < timedelta(0) else "+"
    hours, minutes = divmod(abs(offset) // timedelta(minutes=1), 60)
    try:
        local = (instant + offset).replace(tzinfo=None)
    except OverflowError:
        return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{local.isoformat(timespec='milliseconds')}{sign}{hours:02d}:{minutes:02d}"


def _spelled(draw: st.DrawFn, value: int, low: int, names: list[str]) -> str:
    """A cron field value as a number, or as its name (`JAN`, `SUN`) when it has one."""
    use_name: bool = draw(st.booleans())
    if use_name and value - low < len(names):
        return names[value - low]
    return str(value)


@st.composite
def cron_fields(draw: st.DrawFn, low: int, high: int, names: list[str]) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(["*", "*/n", "v", "a-b", "a-b/n"]))
        step = draw(st.integers(1, high - low + 2))
        if form == "*":
            items.append("*")
        elif form == "*/n":
            items.append(f"*/{step}")
        elif form == "v":
            items.append(_spelled(draw, draw(st.integers(low, high)), low, names))
        else:
            first, last = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
            spelled = f"{_spelled(draw, first, low, names)}-{_spelled(draw, last, low, names)}"
            items.append(spelled + (f"/{step}" if form == "a-b/n" else ""))
    return ",".join(items)


texts = mostly(st.text(max_size=12), st.sampled_from(["\ud800", "x\udfff", "\x00", "\U0010ffff"]))
"""Strings, at times a lone surrogate (JSON's "\\ud800", which UTF-8 cannot carry), a NUL or
the last code point."""
params = st.dictionaries(
    st.sampled_from(["command", "url", "env", "n"]),
    st.none() | st.booleans() | st.integers() | texts | st.lists(texts, max_size=2),
    max_size=3,
)

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
crons = st.one_of(
    st.sampled_from(
        [
            *MACROS,
            "@DAILY",
            " @hourly ",
            "@reboot",
            "0 0 L * *",
            "0 18 LW * *",
            "0 0 * 2 1#5",
            "0 9 15W * *",
            "0 0 L-3 * FRIL",
            "0 0 30 2 *",
            "0 0 29 2 *",
            "0 0 31 4,6,9,11 *",
            "30 2 * * *",
            "0 0 13 * FRI",
            "*/15 * * * *",
        ]
    ),
    st.builds(
        lambda *fields: " ".join(fields),
        cron_fields(0, 59, []),
        cron_fields(0, 23, []),
        cron_fields(1, 31, []),
        cron_fields(1, 12, MONTHS),
        cron_fields(0, 7, DAYS),
    ),
)


def _ends(start: datetime | None) -> st.SearchStrategy[datetime]:
    """Mostly after `start`, as a valid schedule has it; at times anywhere."""
    room_ms = 0 if start is None else (datetime.max.replace(tzinfo=UTC) - start) // MS - 1
    if start is None or room_ms <= 0:
        return instants
    first = start
    later = st.integers(1, min(10**12, room_ms)).map(lambda ms: first + timedelta(milliseconds=ms))
    return mostly(later, instants)


@st.composite
def schedule_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A schedule as a file or an SDK call gives it: fields of every kind, at every edge."""
    data: dict[str, Any] = {"id": "space/probe-1"}
    trigger = draw(st.sampled_from(["cron", "at", "every"]))
    if trigger == "cron":
        data["cron"] = draw(crons)
    elif trigger == "at":
        data["at"] = written(draw, draw(instants))
    else:
        data["every"] = f"{draw(durations_ms(limits.LONGEST_EVERY, limits.SHORTEST_EVERY))}ms"
    data["timezone"] = draw(mostly(st.sampled_from(ZONES), st.sampled_from(HOSTILE_ZONES)))
    start = draw(instants) if trigger == "every" or draw(st.booleans()) else None
    if start is not None:
        data["start_at"] = written(draw, start)
    if draw(st.booleans()):
        data["end_at"] = written(draw, draw(_ends(start)))
    longest_jitter = limits.LONGEST_CALENDAR_JITTER if trigger != "every" else limits.LONGEST_EVERY
    for name, longest in (
        ("jitter", longest_jitter),
        ("catchup_window", limits.LONGEST_CATCHUP_WINDOW),
        ("timeout", limits.LONGEST_TIMEOUT),
        ("retry_backoff", limits.LONGEST_RETRY_BACKOFF),
    ):
        if draw(st.booleans()):
            data[name] = f"{draw(durations_ms(longest))}ms"
    data["misfire"] = draw(st.sampled_from(list(MisfirePolicy)))
    data["overlap"] = draw(st.sampled_from(list(OverlapPolicy)))
    data["dst_gap"] = draw(st.sampled_from(list(DstGapPolicy)))
    data["dst_repeat"] = draw(st.sampled_from(list(DstRepeatPolicy)))
    data["paused"] = draw(st.booleans())
    data["job"] = {
        "kind": draw(mostly(st.sampled_from(["shell", "http", "noop"]), texts)),
        **draw(params),
    }
    data["owner"] = draw(st.none() | texts)
    data["description"] = draw(st.none() | texts)
    data["labels"] = draw(st.dictionaries(texts, texts, max_size=2))
    data["max_attempts"] = draw(
        mostly(
            st.integers(1, limits.MAX_ATTEMPTS),
            st.sampled_from([0, limits.MAX_ATTEMPTS + 1, 2**31, 2**63]),
        )
    )
    return data


def _decided_without_error(outcome: Outcome) -> None:
    """Decisions increase in nominal instant, and each one travels to the runs topic."""
    nominals = [decision.nominal for decision in outcome.decisions]
    assert nominals == sorted(set(nominals))
    state = outcome.state
    if state is None:
        return
    encoder = RunRequestedEncoder(CODECS.run_requested, "ticker-1")
    for decision in outcome.decisions:
        if decision.action is Action.FIRE:
            fired_at = decision.fire_at + timedelta(seconds=1)
            record = run_requested_record(
                decision, state, fired_at=fired_at, partition=3, ticker_instance="ticker-1"
            )
            encoded = CODECS.run_requested.encode(record)
            assert encoder.encode(decision, state, fired_at=fired_at, partition=3) == encoded


def _round_trips(schedule: Schedule, state: ScheduleState) -> None:
    """Through the schedules topic and the changelog and back, unchanged."""
    event = {
        "schedule_id": schedule.id,
        "event_id": uuid.UUID(int=7),
        "change": "upserted",
        "definition": definition_record(schedule),
        "revision": 0,
        "changed_by": "probe",
        "changed_at": limits.EARLIEST_INSTANT,
        "reason": None,
    }
    decoded = CODECS.schedule_event.decode(CODECS.schedule_event.encode(event))
    assert schedule_from_definition(decoded["definition"]) == schedule
    same_bytes_as_fastavro(RecordType.SCHEDULE_EVENT, event)
    same_bytes_as_fastavro(RecordType.TICKER_STATE, state_record(state))
    same_bytes_as_fastavro(RecordType.TICKER_PROGRESS, progress_record(state))
    definition = CODECS.ticker_state.decode(CODECS.ticker_state.encode(state_record(state)))
    progress = CODECS.ticker_progress.decode(CODECS.ticker_progress.encode(progress_record(state)))
    assert state_from_records(definition, progress) == state


def _read_everywhere(schedule: Schedule, changed_at: datetime, now: datetime) -> None:
    """What preview, audit and the executor compute from the schedule."""
    if not next_fires(schedule, now, 3):
        assert never_fires_reason(schedule, now)
    # A short window: the audit settles every occurrence in it, as the ticker would.
    history = [HistoryEvent(schedule.id, 0, 0, "upserted", schedule, changed_at)]
    expected_occurrences(history, now, now + timedelta(seconds=90))
    for attempt in range(1, schedule.max_attempts + 1):
        after_failure(
            attempt=attempt,
            max_attempts=schedule.max_attempts,
            backoff=schedule.retry_backoff,
            failed_at=now,
        )


def _decide_everywhere(schedule: Schedule, changed_at: datetime, now: datetime) -> None:
    created = upserted(None, schedule, version=0, changed_at=changed_at, now=now)
    assert created.state is not None and created.decisions == []
    state = created.state
    _round_trips(schedule, state)
    far = limits.LATEST_INSTANT - DAY
    for later in (now, now + timedelta(minutes=1), now + 40 * DAY, max(now, far)):
        due = decide_due(state, until=later, now=later, limit=5)
        _decided_without_error(due)
        if due.state is not None:
            _round_trips(schedule, due.state)
    ahead = decide_ahead(state)
    if ahead is not None:
        _decided_without_error(ahead)
        assert ahead.decisions[0].fire_at == state.due_at
        holds_at(ahead, ahead.decisions[0].fire_at)
        holds_at(ahead, ahead.decisions[0].fire_at + timedelta(minutes=2))
    # An edit and a delete a little later settle what the schedule owed until then (settling
    # is not bounded, so from a state created at `now`).
    fresh = upserted(None, schedule, version=0, changed_at=now, now=now).state
    assert fresh is not None
    soon = now + timedelta(seconds=90)
    edited = upserted(
        fresh,
        schedule.model_copy(update={"paused": not schedule.paused}),
        version=1,
        changed_at=soon,
        now=soon,
    )
    _decided_without_error(edited)
    _decided_without_error(deleted(fresh, changed_at=soon, now=soon))


@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    data=schedule_inputs(),
    changed_at=st.one_of(in_range, out_of_range),
    now=in_range,
)
def test_every_schedule_is_refused_at_validation_or_decided_without_error(
    data: dict[str, Any], changed_at: datetime, now: datetime
) -> None:
    try:
        schedule = parse_schedule(data, index=0)
    except SchedulesInvalidError as invalid:
        event("refused: " + " ".join(sorted({error.field for error in invalid.errors})))
        for error in invalid.errors:
            assert error.field.split(".")[0] in Schedule.model_fields, error
            assert error.problem, error
        return
    event(f"accepted: {'cron' if schedule.cron else 'at' if schedule.at else 'every'}")
    _decide_everywhere(schedule, changed_at, now)
    _read_everywhere(schedule, changed_at, now)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | texts
    | st.sampled_from(
        [
            "@daily",
            "1h",
            "P1D",
            "2027-01-01T00:00:00Z",
            "9999-12-31T23:59:59-14:00",
            "UTC",
            "localtime",
            "-1ms",
            "9" * 30 + "d",
        ]
    )
    | st.datetimes(timezones=st.none() | st.timezones())
    | st.timedeltas(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
"""Anything a YAML or JSON file, or an SDK caller, can put in a field."""


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    base=st.sampled_from(
        [
            {"id": "a", "cron": "@daily"},
            {"id": "a", "at": "2027-01-01T00:00:00Z"},
            {"id": "a", "every": "1m", "start_at": "2027-01-01T00:00:00Z"},
        ]
    ),
    values=st.dictionaries(
        st.sampled_from([*Schedule.model_fields, "extra"]), json_values, min_size=1, max_size=4
    ),
)
def test_any_value_in_any_field_is_accepted_or_refused_with_the_field_named(
    base: dict[str, Any], values: dict[str, Any]
) -> None:
    try:
        parse_schedule({**base, **values})
    except SchedulesInvalidError as invalid:
        assert all(error.problem for error in invalid.errors)


_LAST_DAY = limits.LATEST_INSTANT - DAY
EDGE_TRIGGERS = [
    pytest.param(
        {"cron": "30 2 * * *", "timezone": "America/New_York", "start_at": _LAST_DAY.isoformat()},
        id="fixed-time-cron-on-the-last-day",
    ),
    pytest.param(
        {"cron": "*/30 1 * * *", "timezone": "Australia/Lord_Howe", "jitter": "1d"},
        id="wildcard-cron-with-a-day-of-jitter",
    ),
    pytest.param(
        {
            "every": "3650d",
            "jitter": "3650d",
            "timezone": "Pacific/Kiritimati",
            "start_at": limits.EARLIEST_INSTANT.isoformat(),
        },
        id="every-ten-years-from-the-epoch",
    ),
    pytest.param(
        {"every": "1s", "start_at": _LAST_DAY.isoformat(), "timezone": "Pacific/Chatham"},
        id="every-second-on-the-last-day",
    ),
    pytest.param(
        {"at": (limits.LATEST_INSTANT - MS).isoformat(), "jitter": "1d"},
        id="at-the-last-millisecond",
    ),
]


@pytest.mark.parametrize("trigger", EDGE_TRIGGERS)
def test_every_policy_combination_is_decided_at_the_edges(trigger: dict[str, Any]) -> None:
    # Overlap is the executor's: it only travels, so it cycles instead of multiplying the rest.
    combinations = itertools.product(
        MisfirePolicy, DstGapPolicy, DstRepeatPolicy, [False, True], [None, "0s", "3650d"]
    )
    overlaps = itertools.cycle(OverlapPolicy)
    for (misfire, gap, repeat, paused, window), overlap in zip(
        combinations, overlaps, strict=False
    ):
        data = {
            "id": "edge",
            **trigger,
            "misfire": misfire,
            "overlap": overlap,
            "dst_gap": gap,
            "dst_repeat": repeat,
            "paused": paused,
            "max_attempts": limits.MAX_ATTEMPTS,
            "retry_backoff": "1h",
            "timeout": "30d",
        }
        if window is not None:
            data["catchup_window"] = window
        schedule = parse_schedule(data)
        for now in (limits.EARLIEST_INSTANT, limits.LATEST_INSTANT - MS):
            _decide_everywhere(schedule, changed_at=now, now=now)
