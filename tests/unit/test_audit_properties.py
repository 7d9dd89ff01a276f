"""The audit owes exactly what a ticker decides, whatever the history and the ticker's timing.

A simulated ticker applies the history with the firing functions as the service does: each
event some time after its `changed_at`, due occurrences decided at random ticks in slices of a
few. Whatever it decided (fired or skipped) with a nominal instant in the window must be what
the audit expects, in order, given only the history and the versions of the fires (as the runs
topic shows them), except what it decided inside a delete or a pause it saw late: those fires
broke the user's "stop", and the audit must name each one a breach. The one case the audit
cannot see, a change seen late whose late decisions were all skips (skips carry no version),
is left out; core/audit.py says what it reports then.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kairos.core.audit import FiredRun, HistoryEvent, expected_occurrences, stopped_spans
from kairos.core.audit_report import FindingKind
from kairos.core.audit_verdict import verify
from kairos.core.firing import Action, Decision, ScheduleState, decide_due, deleted, upserted
from kairos.core.schedule import Schedule

T0 = datetime(2027, 3, 13, 20, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

definitions: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    trigger=st.one_of(
        st.builds(
            lambda m: {"every": f"{m}m", "start_at": T0 + m * 3 * MINUTE},
            st.sampled_from([7, 15, 30, 60]),
        ),
        st.builds(
            lambda c: {"cron": c},
            st.sampled_from(["*/20 * * * *", "0 * * * *", "15,45 * * * *", "30 2 * * *"]),
        ),
    ),
    timezone=st.sampled_from(["UTC", "America/New_York"]),
    jitter=st.sampled_from([None, "5m"]),
    misfire=st.sampled_from(["all", "skip", "latest"]),
    catchup_window=st.sampled_from([None, "40m"]),
    end_at=st.sampled_from([None, T0 + 300 * MINUTE]),
)

changes = st.lists(
    st.tuples(
        st.sampled_from(["upserted", "upserted", "paused", "resumed", "deleted", "tombstone"]),
        definitions,
        st.integers(0, 150),  # minutes after the previous change
        st.integers(0, 90),  # minutes the ticker takes to see it
    ),
    min_size=1,
    max_size=8,
)


def build(fields: dict[str, Any], paused: bool) -> Schedule:
    trigger = fields["trigger"]
    rest = {k: v for k, v in fields.items() if k != "trigger" and v is not None}
    return Schedule.model_validate({"id": "s", **trigger, **rest, "paused": paused})


def history_of(
    steps: list[tuple[str, dict[str, Any], int, int]],
) -> tuple[list[HistoryEvent], list[datetime]]:
    """The events, and when the simulated ticker applies each (never before its change)."""
    events: list[HistoryEvent] = []
    seen: list[datetime] = []
    when = T0
    current: Schedule | None = None
    for offset, (change, fields, gap, delay) in enumerate(steps):
        when += gap * MINUTE
        if change in ("deleted", "tombstone"):
            current = None
        elif change == "upserted" or current is None:
            current = build(fields, paused=False)
        else:
            current = current.model_copy(update={"paused": change == "paused"})
        events.append(HistoryEvent("s", 0, offset, change, current, when))
        seen.append(max([when + delay * MINUTE, *seen]))
    return events, seen


def simulate_ticker(
    events: list[HistoryEvent], seen: list[datetime], ticks: list[int], limit: int, end: datetime
) -> list[tuple[Decision, int]]:
    """Every decision with the version (offset of the definition) it was made under."""
    decided: list[tuple[Decision, int]] = []
    state: ScheduleState | None = None
    floor: datetime | None = None
    moments = sorted({*seen, *(T0 + t * MINUTE for t in ticks), end + 2 * 60 * MINUTE})
    pending = list(zip(events, seen, strict=True))
    for now in moments:
        while pending and pending[0][1] <= now:
            event, _ = pending.pop(0)
            if event.definition is None:
                if state is not None:
                    outcome = deleted(state, event.changed_at, now)
                    decided += [(d, state.version) for d in outcome.decisions]
                    floor = outcome.floor
                state = None
            else:
                outcome = upserted(
                    state,
                    event.definition,
                    event.offset,
                    event.changed_at,
                    now,
                    floor=floor if state is None else None,
                )
                if state is not None:
                    decided += [(d, state.version) for d in outcome.decisions]
                state = outcome.state
        while state is not None:
            outcome = decide_due(state, until=now, now=now, limit=limit)
            decided += [(d, state.version) for d in outcome.decisions]
            state = outcome.state
            if len(outcome.decisions) < limit:
                break
    return decided


def skipped_after_a_change(events: list[HistoryEvent], decided: list[tuple[Decision, int]]) -> bool:
    return any(
        d.action is Action.SKIP
        and version + 1 < len(events)
        and d.nominal >= events[version + 1].changed_at
        for d, version in decided
    )


@settings(max_examples=500, deadline=None)
@given(
    steps=changes,
    ticks=st.lists(st.integers(0, 900), max_size=12),
    limit=st.integers(1, 3),
    window=st.tuples(st.integers(-60, 800), st.integers(1, 600)),
)
def test_the_audit_expects_what_a_ticker_decides(
    steps: list[tuple[str, dict[str, Any], int, int]],
    ticks: list[int],
    limit: int,
    window: tuple[int, int],
) -> None:
    events, seen = history_of(steps)
    start = T0 + window[0] * MINUTE
    end = start + window[1] * MINUTE
    decided = simulate_ticker(events, seen, ticks, limit, end)
    assume(not skipped_after_a_change(events, decided))
    fired: dict[tuple[str, int], datetime] = {}
    for decision, version in decided:
        if decision.action is Action.FIRE:
            latest = fired.get(("s", version), decision.nominal)
            fired[("s", version)] = max(decision.nominal, latest)
    stops = stopped_spans(events)
    in_window = [(d, v) for d, v in decided if start <= d.nominal < end]
    stopped = [d for d, _ in in_window if any(s.holds(d.nominal) for s in stops.get("s", []))]
    owed = expected_occurrences(events, start, end, fired)
    assert [o.run_id for o in owed["s"]] == [d.run_id for d, _ in in_window if d not in stopped]
    fires = [as_fire(d, v) for d, v in in_window if d.action is Action.FIRE]
    report = verify(
        owed, fires, [], start=start, end=end, as_of=end, grace=timedelta(0), stops=stops
    )
    breaches = {FindingKind.FIRED_AFTER_DELETE, FindingKind.FIRED_WHILE_PAUSED}
    flagged = [f.run_id for f in report.findings if f.kind in breaches]
    assert flagged == [d.run_id for d in stopped if d.action is Action.FIRE]
    assert not [f for f in report.findings if f.kind is FindingKind.UNEXPECTED]


def as_fire(decision: Decision, version: int) -> FiredRun:
    return FiredRun(
        run_id=decision.run_id,
        schedule_id=decision.schedule_id,
        nominal=decision.nominal,
        due_at=decision.fire_at,
        fired_at=decision.fire_at,
        lateness_ms=0,
        attempt=1,
        ticker_instance="simulated",
        schedule_offset=version,
        partition=0,
        offset=0,
    )
