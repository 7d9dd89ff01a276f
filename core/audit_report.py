"""The audit's report: each schedule's counts over the window, and every finding.

`kairos.core.audit_verdict` builds it; `kairos audit verify` prints it and exits by its
`verdict` (docs/audit.md).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from kairos.core.audit import ExpectedOccurrence, OpenTransaction

DEFAULT_EARLY_TOLERANCE = timedelta(milliseconds=100)
"""How much earlier than its due instant a fire may be recorded before it counts as early: the
ticker fires at or after the due instant by its own clock, and instants travel in milliseconds."""


class FindingKind(StrEnum):
    LOST = "lost"
    DUPLICATE = "duplicate"
    FIRED_AFTER_DELETE = "fired_after_delete"
    FIRED_WHILE_PAUSED = "fired_while_paused"
    UNEXPECTED = "unexpected"
    EARLY = "early"
    DEAD_LETTERED = "dead_lettered_at_admission"
    UNREPORTED = "unreported"
    CALENDAR = "against_its_calendars"
    """Fired though the calendars in force skip it, or skipped by a calendar though they run it."""
    STARTED_BEFORE_UPSTREAM = "started_before_upstream"
    """Started before an upstream period it waits for succeeded (`kairos.core.audit_upstream`)."""
    WAITING_PAST_DEADLINE = "waiting_past_deadline"
    """Fired to wait for upstream periods, and neither released, started nor ended by its
    wait's end."""
    FIRED_WITHOUT_ITS_WAIT = "fired_without_its_wait"
    """Its definition names upstreams, and the fired record does not carry them (or carries
    others, or another wait or timeout)."""
    RELEASED_BEFORE_UPSTREAM = "released_before_upstream"
    """An executor released it (a `released` run event) before an upstream period it waits for
    succeeded."""
    HIDDEN = "hidden_by_open_transaction"
    """Not a breach: the audit cannot decide until the transaction ends."""

    @property
    def breach(self) -> bool:
        return self is not FindingKind.HIDDEN


class Verdict(StrEnum):
    HOLDS = "holds"
    BREACH = "breach"
    INCONCLUSIVE = "inconclusive"
    """No breach seen, but records an open transaction holds could still make one."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One breach of the promise (or, `hidden`, one the audit cannot rule out yet)."""

    kind: FindingKind
    schedule_id: str
    run_id: str
    nominal: datetime
    due_at: datetime | None
    fired_at: datetime | None
    detail: str


@dataclass(frozen=True, slots=True)
class LatenessSummary:
    """Nearest-rank percentiles of fire lateness (due to fire) in milliseconds; negative: early."""

    count: int
    p50: int
    p90: int
    p99: int
    max: int
    min: int

    @classmethod
    def of(cls, values: Iterable[int]) -> LatenessSummary | None:
        ordered = sorted(values)
        if not ordered:
            return None

        def rank(q: float) -> int:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

        return cls(len(ordered), rank(0.5), rank(0.9), rank(0.99), ordered[-1], ordered[0])


@dataclass(frozen=True)
class ScheduleAudit:
    """One schedule's verdict over the window. The run id lists are in nominal order."""

    schedule_id: str
    expected: int = 0
    fired: int = 0
    skipped: int = 0
    pending: int = 0
    lateness_ms: tuple[int, ...] = ()
    """Lateness of each fired occurrence, from its first commit."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Fired occurrences by their latest run event's kind; `unreported` without any."""
    lost_runs: tuple[ExpectedOccurrence, ...] = ()
    duplicate_runs: dict[str, int] = field(default_factory=dict)
    """Run id to the number of its extra commits, beyond the first."""
    unexpected_runs: tuple[str, ...] = ()
    """Runs fired in the window that the history did not owe (the findings say why)."""
    skipped_runs: tuple[tuple[str, str | None], ...] = ()
    """(run id, the recorded reason) of each occurrence skipped by policy."""
    findings: tuple[Finding, ...] = ()
    reruns: int = 0
    """Runs a re-run request owed (`kairos schedules trigger`, `backfill`) that were fired:
    intentional, never counted as duplicates of the occurrence they re-run."""
    recovered: int = 0
    """Occurrences whose scheduled run is missing but a re-run of them was fired: not lost."""

    @property
    def lost(self) -> int:
        return len(self.lost_runs)

    @property
    def duplicates(self) -> int:
        return sum(self.duplicate_runs.values())

    @property
    def unexpected(self) -> int:
        return len(self.unexpected_runs)

    @property
    def hidden(self) -> int:
        return sum(1 for f in self.findings if f.kind is FindingKind.HIDDEN)

    @property
    def breaches(self) -> int:
        return sum(1 for f in self.findings if f.kind.breach)

    @property
    def lateness(self) -> LatenessSummary | None:
        return LatenessSummary.of(self.lateness_ms)


@dataclass(frozen=True)
class AuditReport:
    """The verdict over `[start, end)` (nominal instants) as of `as_of`."""

    start: datetime
    end: datetime
    as_of: datetime
    grace: timedelta
    schedules: tuple[ScheduleAudit, ...]
    open_transactions: tuple[OpenTransaction, ...] = ()
    early_tolerance: timedelta = DEFAULT_EARLY_TOLERANCE
    outcome_grace: timedelta | None = None
    """`None`: outcomes were counted, not checked."""

    def total(self, name: str) -> int:
        """The sum over schedules of one count: expected, fired, skipped, lost, pending, …"""
        return sum(int(getattr(audit, name)) for audit in self.schedules)

    @property
    def findings(self) -> list[Finding]:
        return [finding for audit in self.schedules for finding in audit.findings]

    @property
    def lateness(self) -> LatenessSummary | None:
        return LatenessSummary.of(value for a in self.schedules for value in a.lateness_ms)

    @property
    def outcomes(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for audit in self.schedules:
            totals.update(audit.outcomes)
        return dict(sorted(totals.items()))

    @property
    def verdict(self) -> Verdict:
        kinds = {finding.kind for finding in self.findings}
        if any(kind.breach for kind in kinds):
            return Verdict.BREACH
        return Verdict.INCONCLUSIVE if FindingKind.HIDDEN in kinds else Verdict.HOLDS

    @property
    def ok(self) -> bool:
        """The promise holds for the window: no breach, and nothing left undecided."""
        return self.verdict is Verdict.HOLDS
