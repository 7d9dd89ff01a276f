"""Overlap decisions: what a new run does while other runs of its schedule are unfinished."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.overlap import (
    Admission,
    OverlapDecision,
    PeerRun,
    RunState,
    decide_admission,
    next_to_start,
)
from kairos.core.schedule import OverlapPolicy

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
NEW = "report@2027-03-14T07:05:00Z"


def peer(minute: int, state: RunState) -> PeerRun:
    nominal = T0 + timedelta(minutes=minute)
    return PeerRun(f"report@{nominal:%Y-%m-%dT%H:%M:%SZ}", state, nominal)


REPLACED = f"overlap policy replace: replaced by run {NEW}"
RUNNING = peer(0, RunState.RUNNING)
RETRY_WAIT = peer(1, RunState.READY)
QUEUED = peer(2, RunState.QUEUED)
DONE = peer(3, RunState.SUCCEEDED)


@pytest.mark.parametrize("policy", list(OverlapPolicy))
def test_a_run_without_unfinished_peers_starts(policy: OverlapPolicy) -> None:
    finished = [peer(m, state) for m, state in enumerate(s for s in RunState if s.finished)]
    assert decide_admission(policy, NEW, finished) == OverlapDecision(Admission.START)


@pytest.mark.parametrize(
    ("policy", "peers", "expected"),
    [
        pytest.param(
            OverlapPolicy.ALLOW,
            [RUNNING, QUEUED],
            OverlapDecision(Admission.START),
            id="allow-starts-beside",
        ),
        pytest.param(
            OverlapPolicy.SKIP,
            [RETRY_WAIT, RUNNING],
            OverlapDecision(
                Admission.SKIP,
                reason="overlap policy skip: run "
                "report@2027-03-14T07:00:00Z of the schedule is still running",
            ),
            id="skip-names-the-earliest-unfinished-run",
        ),
        pytest.param(
            OverlapPolicy.SKIP,
            [RETRY_WAIT],
            OverlapDecision(
                Admission.SKIP,
                reason="overlap policy skip: run "
                "report@2027-03-14T07:01:00Z of the schedule is still ready",
            ),
            id="skip-while-a-retry-is-pending",
        ),
        pytest.param(
            OverlapPolicy.QUEUE,
            [QUEUED],
            OverlapDecision(Admission.QUEUE),
            id="queue-behind-queued",
        ),
        pytest.param(
            OverlapPolicy.REPLACE,
            [RUNNING, RETRY_WAIT, QUEUED],
            OverlapDecision(
                Admission.QUEUE,
                reason=REPLACED,
                stop_running=(RUNNING.run_id,),
                cancel_waiting=(RETRY_WAIT.run_id, QUEUED.run_id),
            ),
            id="replace-waits-for-the-running-to-stop",
        ),
        pytest.param(
            OverlapPolicy.REPLACE,
            [RETRY_WAIT],
            OverlapDecision(Admission.START, reason=REPLACED, cancel_waiting=(RETRY_WAIT.run_id,)),
            id="replace-starts-at-once-when-nothing-runs",
        ),
    ],
)
def test_unfinished_peers_decide_by_policy(
    policy: OverlapPolicy, peers: list[PeerRun], expected: OverlapDecision
) -> None:
    assert decide_admission(policy, NEW, [*peers, DONE]) == expected


def test_a_redelivered_run_is_not_its_own_peer() -> None:
    itself = PeerRun(NEW, RunState.RUNNING, T0)
    assert decide_admission(OverlapPolicy.SKIP, NEW, [itself]).admission is Admission.START


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        pytest.param(
            [QUEUED, peer(4, RunState.QUEUED), peer(-1, RunState.QUEUED)],
            peer(-1, RunState.QUEUED).run_id,
            id="earliest-nominal-first",
        ),
        pytest.param([RUNNING, QUEUED], None, id="waits-while-running"),
        pytest.param([RETRY_WAIT, QUEUED], None, id="waits-for-a-pending-retry"),
        pytest.param([DONE], None, id="nothing-queued"),
    ],
)
def test_the_earliest_queued_run_starts_once_nothing_holds_the_schedule(
    peers: list[PeerRun], expected: str | None
) -> None:
    assert next_to_start(peers) == expected
