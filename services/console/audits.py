"""Audit windows the console runs: `kairos audit verify` itself, on a thread, kept in the view.

An audit proves the promise from the topics, so it reads the topics (the view is only a copy of
them); it runs once per request, one at a time, and its report is stored, so that pages only
ever read stored reports. A report keeps the findings (lost, duplicated, pending runs, each
naming its schedule) and the totals; the per-schedule table of the CLI's `--json` is left out:
at a million schedules it would be a million rows nobody reads on a page.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kairos.core.errors import KairosError
from kairos.core.instants import epoch_ms
from kairos.services.console.view import ConsoleView

logger = logging.getLogger(__name__)

AuditRunner = Callable[[datetime, datetime, datetime], dict[str, Any]]
"""(from, to, as of) -> `kairos audit verify --json`'s document; raises `KairosError`."""

FINDINGS_KEPT = 1_000
WAITING_AUDITS = 1
"""Audits queued behind the one running: a console asked for many runs one and refuses more."""


class AuditsBusyError(KairosError):
    """Asked for an audit while another already waits."""


class AuditJobs:
    """Runs requested audit windows one after the other and stores each report."""

    def __init__(self, view: ConsoleView, runner: AuditRunner) -> None:
        self._view = view
        self._runner = runner
        self._queue: queue.Queue[int | None] = queue.Queue()
        with view.connection() as db:
            db.execute(
                "UPDATE audits SET state = 'interrupted' WHERE state IN ('queued', 'running')"
            )
        self._thread = threading.Thread(target=self._work, name="audits", daemon=True)
        self._thread.start()

    def request(self, start: datetime, end: datetime) -> int:
        """Queue an audit of the window; `AuditsBusyError` when one is already waiting."""
        if self._queue.qsize() >= WAITING_AUDITS:
            raise AuditsBusyError(
                "an audit is already waiting for the one running; ask again once it has started"
            )
        with self._view.connection() as db:
            audit_id = int(
                db.execute(
                    "INSERT INTO audits (requested_at, window_from, window_to, state) "
                    "VALUES (?, ?, ?, 'queued') RETURNING audit_id",
                    (epoch_ms(datetime.now(UTC)), epoch_ms(start), epoch_ms(end)),
                ).fetchone()[0]
            )
        self._queue.put(audit_id)
        return audit_id

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _work(self) -> None:
        while (audit_id := self._queue.get()) is not None:
            with self._view.connection() as db:
                db.execute("UPDATE audits SET state = 'running' WHERE audit_id = ?", (audit_id,))
                start, end = db.execute(
                    "SELECT window_from, window_to FROM audits WHERE audit_id = ?", (audit_id,)
                ).fetchone()
            state, verdict, document = self._report(_instant(start), _instant(end))
            with self._view.connection() as db:
                db.execute(
                    "UPDATE audits SET state = ?, verdict = ?, report = ? WHERE audit_id = ?",
                    (state, verdict, json.dumps(document), audit_id),
                )

    def _report(self, start: datetime, end: datetime) -> tuple[str, str | None, dict[str, Any]]:
        """(state, verdict, report) of one window; never raises, so one audit's failure leaves
        the thread serving the next (an audit left 'running' forever would hide it)."""
        try:
            document = self._runner(start, end, datetime.now(UTC))
            verdict = str(document["verdict"])
            findings = list(document["findings"])
        except KairosError as error:
            return "failed", None, {"error": str(error)}
        except Exception as error:
            logger.exception("console audit of %s to %s failed", start, end)
            return "failed", None, {"error": f"the audit failed unexpectedly: {error!r}"}
        document.pop("schedules", None)
        document["findings_total"] = len(findings)
        document["findings"] = findings[:FINDINGS_KEPT]
        return "done", verdict, document


def _instant(epoch_ms_value: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms_value / 1000, UTC)


def audits(view: ConsoleView, limit: int = 20) -> list[dict[str, Any]]:
    with view.connection() as db:
        rows = db.execute(
            "SELECT audit_id FROM audits ORDER BY audit_id DESC LIMIT ?", (limit,)
        ).fetchall()
    return [found for (audit_id,) in rows if (found := audit(view, audit_id)) is not None]


def audit(view: ConsoleView, audit_id: int) -> dict[str, Any] | None:
    with view.connection() as db:
        row = db.execute(
            "SELECT audit_id, requested_at, window_from, window_to, state, verdict, report "
            "FROM audits WHERE audit_id = ?",
            (audit_id,),
        ).fetchone()
    if row is None:
        return None
    return {
        "audit_id": row[0],
        "requested_at": _instant(row[1]).isoformat(),
        "from": _instant(row[2]).isoformat(),
        "to": _instant(row[3]).isoformat(),
        "state": row[4],
        "verdict": row[5],
        "report": None if row[6] is None else json.loads(row[6]),
    }
