"""The console's audit windows: bounded, one waiting at most, reports kept with their verdict."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kairos.services.console import audits
from kairos.services.console.audits import AuditJobs, AuditsBusyError
from kairos.services.console.view import ConsoleView
from kairos.streams.sql.dialects import SQLITE_SCHEME
from tests.helpers import eventually

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def test_one_audit_waits_behind_the_running_one_and_a_third_is_refused(tmp_path: Path) -> None:
    view = ConsoleView(f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}")
    release = threading.Event()
    started: list[datetime] = []

    def runner(start: datetime, end: datetime, as_of: datetime) -> dict[str, Any]:
        started.append(start)
        release.wait(30)
        findings = [{"kind": "lost"}] * 1_500
        return {"verdict": "breach", "findings": findings, "schedules": [{"id": "x"}]}

    jobs = AuditJobs(view, runner)
    try:
        first = jobs.request(T0, T0 + timedelta(hours=1))
        eventually(lambda: started, message="the first audit did not start")
        second = jobs.request(T0, T0 + timedelta(hours=2))
        with pytest.raises(AuditsBusyError, match="already waiting"):
            jobs.request(T0, T0 + timedelta(hours=3))
        release.set()
        done = eventually(
            lambda: (found := audits.audit(view, second)) and found["state"] == "done" and found,
            message="the second audit did not finish",
        )
    finally:
        release.set()
        jobs.stop()
    report = done["report"]
    assert done["verdict"] == "breach" and "schedules" not in report
    assert report["findings_total"] == 1_500 and len(report["findings"]) == 1_000
    assert [a["audit_id"] for a in audits.audits(view)] == [second, first]


def test_an_audit_running_when_the_console_stopped_is_shown_interrupted(tmp_path: Path) -> None:
    view = ConsoleView(f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}")
    with view.connection() as db:
        db.execute(
            "INSERT INTO audits (requested_at, window_from, window_to, state) "
            "VALUES (0, 0, 60000, 'running')"
        )
    jobs = AuditJobs(view, lambda *_: {})
    jobs.stop()
    (shown,) = audits.audits(view)
    assert shown["state"] == "interrupted"


def test_an_audit_that_fails_unexpectedly_is_shown_failed_and_the_next_one_runs(
    tmp_path: Path,
) -> None:
    view = ConsoleView(f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}")
    answers: list[dict[str, Any]] = [{"verdict": "holds"}, {"verdict": "holds", "findings": []}]
    jobs = AuditJobs(view, lambda *_: answers.pop(0))
    try:
        broken = jobs.request(T0, T0 + timedelta(hours=1))
        failed = eventually(
            lambda: (found := audits.audit(view, broken)) and found["state"] == "failed" and found,
            message="the broken audit was not marked failed",
        )
        after = jobs.request(T0, T0 + timedelta(hours=2))
        done = eventually(
            lambda: (found := audits.audit(view, after)) and found["state"] == "done" and found,
            message="the audit after a failed one did not run",
        )
    finally:
        jobs.stop()
    assert "failed unexpectedly" in failed["report"]["error"]
    assert done["verdict"] == "holds"
