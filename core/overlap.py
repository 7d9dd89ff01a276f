"""The life of a run in the executors' store, and the overlap policy that governs its start.

Pure: the store reads the schedule's other unfinished runs (holding the schedule's lock, so that
executors on many hosts decide one at a time) and applies what these functions return in the
same database transaction.

A run is *unfinished* while it is queued, ready (about to start, or waiting for a retry) or
running; a retry is part of the run, so a schedule's run is not over until its last attempt is.
What a new run does while another run of its schedule is unfinished:

- `allow`: it starts beside the other.
- `skip`: it does not start; it ends as skipped, with the unfinished run named in the reason.
- `queue`: it waits, queued, until no run of the schedule is ready or running; queued runs start
  one at a time in nominal order.
- `replace`: running runs are asked to stop (the executor running one kills its job), ready and
  queued ones are cancelled at once; the new run waits queued until the running ones have
  stopped, then starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import assert_never

from kairos.core.schedule import OverlapPolicy


class RunState(StrEnum):
    """Where a run is in its life; the last four are final."""

    QUEUED = "queued"
    """Waiting for an earlier run of the schedule to end (overlap `queue` or `replace`)."""
    READY = "ready"
    """May start at its next attempt instant: now, or later when it waits for a retry."""
    RUNNING = "running"
    """An attempt runs under an executor's lease."""
    SUCCEEDED = "succeeded"
    DEAD_LETTERED = "dead_lettered"
    """Every attempt failed; the request went to the dead-letter topic."""
    SKIPPED = "skipped"
    """Never started, by the overlap policy `skip`."""
    CANCELLED = "cancelled"
    """Stopped or never started because a newer run replaced it (overlap `replace`)."""

    @property
    def finished(self) -> bool:
        return self not in UNFINISHED


UNFINISHED = frozenset({RunState.QUEUED, RunState.READY, RunState.RUNNING})
IN_PROGRESS = frozenset({RunState.READY, RunState.RUNNING})
"""Unfinished runs that hold the schedule: a queued run waits for these to end."""


@dataclass(frozen=True, slots=True)
class PeerRun:
    """Another run of the same schedule, as the store has it."""

    run_id: str
    state: RunState
    nominal_at: datetime


class Admission(StrEnum):
    START = "start"
    """The run is ready to start now."""
    QUEUE = "queue"
    """The run waits until the schedule's runs in progress have ended."""
    SKIP = "skip"
    """The run never starts."""


@dataclass(frozen=True, slots=True)
class OverlapDecision:
    """What to do with a new run, and (policy `replace`) with the runs it replaces."""

    admission: Admission
    reason: str | None = None
    """Why the run was skipped, or why the replaced runs were stopped."""
    stop_running: tuple[str, ...] = ()
    """Running runs whose executors must stop them."""
    cancel_waiting: tuple[str, ...] = ()
    """Ready and queued runs that end cancelled without starting again."""


def decide_admission(
    policy: OverlapPolicy, run_id: str, peers: Sequence[PeerRun]
) -> OverlapDecision:
    """Admit the new run `run_id` given the other runs of its schedule (finished ones ignored)."""
    unfinished = sorted(
        (p for p in peers if p.state in UNFINISHED and p.run_id != run_id),
        key=lambda p: (p.nominal_at, p.run_id),
    )
    if not unfinished or policy is OverlapPolicy.ALLOW:
        return OverlapDecision(Admission.START)
    if policy is OverlapPolicy.SKIP:
        first = unfinished[0]
        return OverlapDecision(
            Admission.SKIP,
            reason=f"overlap policy skip: run {first.run_id} of the schedule is still "
            f"{first.state.value}",
        )
    if policy is OverlapPolicy.QUEUE:
        return OverlapDecision(Admission.QUEUE)
    if policy is OverlapPolicy.REPLACE:
        running = tuple(p.run_id for p in unfinished if p.state is RunState.RUNNING)
        waiting = tuple(p.run_id for p in unfinished if p.state is not RunState.RUNNING)
        return OverlapDecision(
            # Nothing left to wait for when no replaced run is running.
            Admission.QUEUE if running else Admission.START,
            reason=f"overlap policy replace: replaced by run {run_id}",
            stop_running=running,
            cancel_waiting=waiting,
        )
    assert_never(policy)


def next_to_start(peers: Sequence[PeerRun]) -> str | None:
    """After a run of the schedule ended: the queued run to make ready, if one may start now."""
    if any(p.state in IN_PROGRESS for p in peers):
        return None
    queued = [p for p in peers if p.state is RunState.QUEUED]
    if not queued:
        return None
    return min(queued, key=lambda p: (p.nominal_at, p.run_id)).run_id
