"""Which runs missed their deadline: an executor's report stands, the rest are judged at `now`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kairos.core.late_runs import ReportedMiss, RunProgress, late_runs
from kairos.core.schedule_lifecycle import Deadline

T = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
DEADLINE = {"ops.report": Deadline(start_by=MINUTE, finish_by=10 * MINUTE)}


def _run(
    n: int, start: timedelta | None, success: timedelta | None, *, skipped: bool = False
) -> RunProgress:
    nominal = T + n * 30 * MINUTE
    return RunProgress(
        f"ops.report@{n}",
        "ops.report",
        nominal,
        skipped,
        None if start is None else nominal + start,
        None if success is None else nominal + success,
    )


def test_a_run_is_late_by_each_deadline_it_missed_and_not_by_one_still_ahead() -> None:
    runs = [
        _run(0, 30 * timedelta(seconds=1), 5 * MINUTE),  # on time on both
        _run(1, 2 * MINUTE, 20 * MINUTE),  # late on both
        _run(2, None, None, skipped=True),  # not run on purpose
        _run(3, None, None),  # not started 30 s past start_by; finish_by still ahead
    ]
    now = T + 91 * MINUTE + 30 * timedelta(seconds=1)
    rows = late_runs(runs, [], DEADLINE, now)
    assert [(r["run_id"], r["deadline"]) for r in rows] == [
        ("ops.report@1", "start_by"),
        ("ops.report@1", "finish_by"),
        ("ops.report@3", "start_by"),
    ]


def test_an_executors_report_stands_in_for_the_judgement_of_the_same_deadline() -> None:
    reason = "start_by 1m: not started by 2027-03-01T09:31:00Z"
    reported = [ReportedMiss("ops.report@1", "ops.report", T + 30 * MINUTE, "exec-7", reason)]
    rows = late_runs([_run(1, 2 * MINUTE, 5 * MINUTE)], reported, DEADLINE, T + 2 * 60 * MINUTE)
    assert [(r["deadline"], r["reported_by"], r["due_by"]) for r in rows] == [
        ("start_by", "exec-7", T + 31 * MINUTE)
    ]
