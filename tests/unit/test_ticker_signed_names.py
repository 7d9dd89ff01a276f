"""A signed ticker verifies every record that names a team, even one it could take unsigned, so
on a change it took the team named is one it verified (H6: what readers show), pure."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message

from kairos.core.firing import ScheduleState
from kairos.core.ownership import Team
from kairos.core.schedule import Schedule
from kairos.services.ticker.lifecycle import after_last_run_records, ticker_change_records
from kairos.services.ticker.ownership import TickerOwnership
from kairos.streams.readers.team_events import TeamChange
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.schedule_events import read_schedule_message
from kairos.streams.wire.signing import TEAM_HEADER, Signer, new_signing_key

pytestmark = pytest.mark.unit

CODECS = make_codecs()
TOPIC = "kairos.schedules"
NOW = datetime(2027, 3, 1, tzinfo=UTC)
_, PAYMENTS = new_signing_key("payments")
_, STRANGER = new_signing_key("stranger")


class _Teams:
    topic = "kairos.teams"

    def refresh(self, timeout_s: float | None = None) -> dict[str, TeamChange]:
        team = Team("payments", (PAYMENTS.public_key(),))
        return {"payments": TeamChange("payments", team, "admin", NOW)}

    def close(self) -> None:
        pass


def _ownership(earned: bool = False) -> TickerOwnership:
    ownership = TickerOwnership(max_age_ms=300_000, pause_earned=lambda state: earned)
    ownership.start(_Teams())
    return ownership


def _message(key: str, value: bytes | None, signer: Signer | None, named: str | None) -> Message:
    now_ms = int(time.time() * 1000)
    headers = [] if signer is None else signer.headers(TOPIC, key.encode(), value, now_ms)
    if named is not None:
        headers = [(n, named.encode() if n == TEAM_HEADER else v) for n, v in headers]
    return Message(
        topic=TOPIC,
        partition=0,
        offset=7,
        key=key.encode(),
        value=value,
        headers=headers or None,
        timestamp=(TIMESTAMP_LOG_APPEND_TIME, now_ms),
    )


def _refused(message: Message, state: ScheduleState | None, earned: bool = False) -> str | None:
    change = read_schedule_message(CODECS.schedule_event, message, 1)
    refused = _ownership(earned).refused(message, change, state, None)
    return None if refused is None else refused.reason


def test_a_delete_of_nothing_is_taken_unsigned_but_not_under_a_name_it_cannot_prove() -> None:
    assert _refused(_message("gone", None, None, None), None) is None
    assert _refused(_message("gone", None, PAYMENTS, None), None) is None
    forged = _refused(_message("gone", None, STRANGER, "payments"), None)
    assert forged is not None and "does not verify with any key of team 'payments'" in forged


def test_the_tickers_own_ending_is_taken_unsigned_but_not_under_a_forged_name() -> None:
    trial = Schedule(id="ops.trial", every=timedelta(seconds=1), start_at=NOW, max_runs=2)
    ran_out = ScheduleState(trial, 3, next_nominal=None, runs_fired=2)
    ((key, pause, _),) = after_last_run_records(ran_out, CODECS, "t1", NOW)
    assert _refused(_message(key.decode(), pause, None, None), ran_out) is None
    forged = _refused(_message(key.decode(), pause, STRANGER, "payments"), ran_out)
    assert forged is not None and "does not verify" in forged


def test_a_pause_on_failure_is_taken_unsigned_only_when_the_tickers_own_count_reached_it() -> None:
    flaky = Schedule(
        id="payments.flaky",
        every=timedelta(minutes=1),
        start_at=NOW,
        owner="payments",
        pause_on_failure=3,
    )
    held = ScheduleState(flaky, 5, next_nominal=NOW)
    ((key, pause, _),) = ticker_change_records(
        held, CODECS, "t1", NOW, delete=False, reason="paused after 3 failed runs in a row: x"
    )
    unsigned = _message(key.decode(), pause, None, None)
    assert _refused(unsigned, held, earned=True) is None
    refused = _refused(unsigned, held, earned=False)
    assert refused is not None, "a team's unsigned pause of another team's schedule was taken"


def test_an_unsigned_change_that_pauses_and_changes_more_is_refused_even_when_earned() -> None:
    flaky = Schedule(
        id="payments.flaky",
        every=timedelta(minutes=1),
        start_at=NOW,
        owner="payments",
        pause_on_failure=3,
    )
    held = ScheduleState(flaky, 5, next_nominal=NOW)
    taken_over = ScheduleState(flaky.model_copy(update={"owner": "growth"}), 5, next_nominal=NOW)
    ((key, pause, _),) = ticker_change_records(
        taken_over, CODECS, "t1", NOW, delete=False, reason="paused after 3 failed runs in a row"
    )
    assert _refused(_message(key.decode(), pause, None, None), held, earned=True) is not None
