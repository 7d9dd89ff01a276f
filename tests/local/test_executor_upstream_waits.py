"""Runs held for their upstream periods, on the in-memory cluster with a real SQLite store: held
until the upstream's period succeeds, ended with the reason the ticker resolved (an upstream
that does not exist or grant, a period that does not match) or when the upstream does not
succeed within the wait. Across two teams, with real tickers and executors:
tests/broker/test_dependencies_end_to_end.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kairos.core.schedule import JobSpec
from kairos.services.executor import ANY_TEAM, upstream_gate
from kairos.services.executor.service import Executor
from kairos.streams.wire.records import job_record
from tests.fakes.executor_world import NOMINAL, ExecutorWorld

MATCHED = {"schedule_id": "settle", "match": "same_instant", "resolution": "matched",
           "period_at": NOMINAL, "reason": None}  # fmt: skip


TEAMS_HANDLER = "count-for-teams"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ExecutorWorld]:
    world = ExecutorWorld(tmp_path)
    executed = world.executed
    world.handlers.add(TEAMS_HANDLER, lambda run: executed.update([run.run_id]), teams=ANY_TEAM)
    yield world
    world.close()


def _run(world: ExecutorWorld, schedule_id: str, owner: str, **fields: Any) -> dict[str, Any]:
    """A run of a team's schedule, its job the counting handler any team may call."""
    job = job_record(JobSpec.model_validate({"kind": "python", "handler": TEAMS_HANDLER}))
    nominal = fields.pop("nominal", NOMINAL)
    return world.request(schedule_id, nominal) | {"owner": owner, "job": job, **fields}


def _turn_until(world: ExecutorWorld, executor: Executor, done: Any, what: str) -> None:
    """Turn, a second of the fake clock each, until `done()`: bounded in real time, since the
    jobs run on real threads (a loaded machine runs them slower, never in fewer turns)."""
    deadline = time.monotonic() + 20.0
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within 20s: {what}")
        _turns(world, executor, 1)
        time.sleep(0.005)


def _waiting(world: ExecutorWorld, timeout: str = "fail", **fields: Any) -> dict[str, Any]:
    return _run(world, "export", "ledger") | {
        "upstream": [MATCHED],
        "upstream_wait_ms": 3_600_000,
        "upstream_timeout": timeout,
        **fields,
    }


def _turns(world: ExecutorWorld, executor: Executor, seconds: int) -> None:
    """Turn once per second of the fake clock: the gate sweeps at the reaping's pace."""
    for _ in range(seconds):
        world.clock.advance(1.0)
        executor.turn()


def test_a_held_run_starts_only_after_its_upstream_period_succeeded(world: ExecutorWorld) -> None:
    executor, _ = world.executor()
    executor.connect()
    export = _waiting(world)
    world.publish(export)
    _turns(world, executor, 5)
    assert world.executed[export["run_id"]] == 0
    assert world.steps(export["run_id"]) == []

    settle = _run(world, "settle", "payments")
    world.publish(settle)
    _turn_until(
        world,
        executor,
        lambda: world.steps(export["run_id"])[-1:] == ["succeeded"],
        "the export ran after the settlement",
    )
    executor.disconnect()
    events = [(e["run_id"], e["kind"]) for e in world.run_events()]
    assert events.index((settle["run_id"], "succeeded")) < events.index(
        (export["run_id"], "started")
    )
    assert world.executed[export["run_id"]] == 1


def test_an_upstream_success_releases_its_runs_however_far_the_round_is_from_them(
    world: ExecutorWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round of held runs is long when other teams hold many: a round that never reaches
    the export (no time for it at all) must not keep it from starting once settle succeeded."""
    executor, _ = world.executor()
    executor.connect()
    export = _waiting(world)
    world.publish(export)
    _turns(world, executor, 2)
    monkeypatch.setattr(upstream_gate, "SWEEP_BUDGET_S", 0.0)

    world.publish(_run(world, "settle", "payments"))
    _turn_until(
        world,
        executor,
        lambda: world.steps(export["run_id"])[-1:] == ["succeeded"],
        "the export ran after the settlement, though the round never came to it",
    )
    executor.disconnect()
    assert world.executed[export["run_id"]] == 1


def test_an_upstream_the_ticker_refused_ends_the_run_at_once_with_its_reason(
    world: ExecutorWorld,
) -> None:
    executor, _ = world.executor()
    executor.connect()
    reason = "upstream schedule settle belongs to payments, which does not let ledger's ..."
    refused = MATCHED | {"resolution": "refused", "period_at": None, "reason": reason}
    export = _waiting(world, upstream=[refused])
    world.publish(export, _run(world, "settle", "payments"))
    _turn_until(
        world,
        executor,
        lambda: world.steps(export["run_id"]) == ["dead_lettered"],
        "the export was dead-lettered",
    )
    executor.disconnect()
    (event,) = [e for e in world.run_events() if e["run_id"] == export["run_id"]]
    assert event["reason"] == reason
    assert world.executed[export["run_id"]] == 0
    assert [d["key"] for d in world.dead_letters()] == [export["run_id"].encode()]


def test_a_run_whose_upstream_never_succeeds_is_skipped_at_the_end_of_its_wait(
    world: ExecutorWorld,
) -> None:
    executor, _ = world.executor()
    executor.connect()
    world.clock.advance((NOMINAL - world.clock()).total_seconds())
    export = _waiting(world, timeout="skip", upstream_wait_ms=10_000)
    world.publish(export)
    _turns(world, executor, 5)
    assert world.steps(export["run_id"]) == []
    _turns(world, executor, 10)
    executor.disconnect()
    (event,) = [e for e in world.run_events() if e["run_id"] == export["run_id"]]
    assert event["kind"] == "skipped"
    assert "for the upstream periods ending at settle at 2027-03-14T07:00:00Z" in event["reason"]
    assert world.executed[export["run_id"]] == 0


def test_a_run_no_upstream_period_matches_is_skipped_whatever_its_timeout_says(
    world: ExecutorWorld,
) -> None:
    executor, _ = world.executor()
    executor.connect()
    reason = "no period of upstream settle matches this run's (same_instant): nothing to wait"
    unmatched = MATCHED | {"resolution": "unmatched", "period_at": None, "reason": reason}
    export = _waiting(world, timeout="fail", upstream=[unmatched])
    world.publish(export)
    _turn_until(world, executor, lambda: bool(world.steps(export["run_id"])), "the export ended")
    executor.disconnect()
    assert world.steps(export["run_id"]) == ["skipped"]
    assert [e["reason"] for e in world.run_events()] == [reason]
    assert world.executed[export["run_id"]] == 0
