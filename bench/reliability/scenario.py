"""One scenario's run: a window of steady load, the fault inside it, then the verdict.

The window is whole minutes of nominal instants. The fault is injected `FAULT_AFTER_S` (plus a
seeded few seconds) into it; the window ends; whatever the fault left broken is mended; then
`kairos audit verify --outcomes` is asked, again every few seconds until it holds or the drain
bound passes, whether every occurrence owed in the window fired once and its run finished. A
late run is late, not lost: only what is still missing at the bound counts as lost.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from bench.common import Observation, RunsObserver, minute_after, sleep_until
from bench.outcome import percentiles

if TYPE_CHECKING:
    from bench.reliability.system import System

FAULT_AFTER_S = 20
DRAIN_S = 300
AUDIT_EVERY_S = 15
OUTCOME_GRACE = "90s"
"""Above a run's longest life here (a 3 s shell job, or a few retries after an executor
died holding its lease), so an audit flags only a run that really went unfinished."""

Inject = Callable[["System", random.Random], list[str]]


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    kafka_promise: str
    """What Kafka itself promises for the same failure."""
    inject: Inject
    window_s: int = 120


@dataclass
class ScenarioResult:
    name: str
    window: str
    steps: list[str]
    restarted: list[str]
    expected: int = 0
    fired: int = 0
    lost: int = 0
    committed_twice: int = 0
    executed_twice: int = 0
    """Runs whose effect (a row in the dedupe store's transaction) was recorded twice, so far."""
    shell_ended_twice: int = 0
    """Runs whose shell job ran to its end twice, so far: at least once by nature."""
    unfinished: int = 0
    verdict: str = ""
    lateness_ms: dict[str, float] = field(default_factory=dict)
    """Seen by a read_committed consumer, minus the due instant (nominal plus jitter)."""
    audit_lateness_ms: dict[str, Any] = field(default_factory=dict)
    """The audit's: the ticker's `fired_at` minus the due instant."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds_to_hold: float | None = None
    """From the window's end until the audit first held (the last due instants are up to a
    minute after it: the jitter)."""
    heal_s: float = 0.0
    """Starting again what the fault left down (a broker waits for its replicas to catch up),
    after the window and before the first audit."""
    audits: list[str] = field(default_factory=list)
    """Each audit asked, in order: when, its verdict, and what kept it from holding."""


def audit(system: System, start: datetime, end: datetime) -> tuple[int, dict[str, Any]]:
    """`kairos audit verify --outcomes --json` over the window, as an operator runs it."""
    settings = system.settings
    done = subprocess.run(
        [
            sys.executable, "-m", "kairos.cli",
            "--bootstrap-servers", settings.bootstrap_servers,
            "--topic-prefix", settings.topic_prefix,
            "--schedules-partitions", str(settings.schedules_partitions),
            "audit", "verify",
            "--from", f"{start:%Y-%m-%dT%H:%M:%SZ}", "--to", f"{end:%Y-%m-%dT%H:%M:%SZ}",
            "--grace", "5s", "--outcomes", "--outcome-grace", OUTCOME_GRACE, "--json",
        ],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **system.client_env()},
    )  # fmt: skip
    if done.returncode not in (0, 1, 3):
        raise RuntimeError(f"the audit could not run ({done.returncode}): {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


def run(system: System, scenario: Scenario, rng: random.Random) -> ScenarioResult:
    start = minute_after(datetime.now(UTC) + timedelta(seconds=5))
    end = start + timedelta(seconds=scenario.window_s)
    observer = RunsObserver(system.settings, keep_from=start.timestamp())
    supervised = len(system.supervisor.restarts) if system.supervisor else 0
    print(f"{scenario.name}: window {start:%H:%M:%S}–{end:%H:%M:%S}Z", flush=True)
    try:
        sleep_until(start + timedelta(seconds=FAULT_AFTER_S + rng.uniform(0, 10)))
        steps = scenario.inject(system, rng)
        for step in steps:
            print(f"  {step}", flush=True)
        sleep_until(end)
        restarted = system.supervisor.restarts[supervised:] if system.supervisor else []
        healing = time.monotonic()
        restarted += system.heal()
        heal_s = time.monotonic() - healing
        result = ScenarioResult(scenario.name, f"{start:%H:%M}–{end:%H:%M}Z", steps, restarted)
        result.heal_s = heal_s
        _settle(system, result, start, end)
    finally:
        observer.stop()
    result.lateness_ms = _lateness(observer.observations(), start, end)
    twice = system.executed_twice()
    result.executed_twice = len(twice)
    result.shell_ended_twice = system.shell_jobs_ended_twice()
    return result


def _settle(system: System, result: ScenarioResult, start: datetime, end: datetime) -> None:
    """Audit until the window holds or the drain bound passes; keep the last report."""
    settled_by = time.monotonic() + DRAIN_S
    while True:
        code, report = audit(system, start, end)
        _read_report(result, code, report)
        if code == 0 or time.monotonic() > settled_by:
            break
        time.sleep(AUDIT_EVERY_S)
    if code == 0:
        result.seconds_to_hold = (datetime.now(UTC) - end).total_seconds()


def _read_report(result: ScenarioResult, code: int, report: dict[str, Any]) -> None:
    result.verdict = {0: "holds", 1: "breach", 3: "inconclusive"}[code]
    kinds = Counter(finding["kind"] for finding in report.get("findings", []))
    result.audits.append(
        f"{datetime.now(UTC):%H:%M:%S} {result.verdict}: lost {report['lost']} pending "
        f"{report['pending']} hidden {report['hidden']} duplicates {report['duplicates']} "
        f"findings {dict(kinds)}"
    )
    result.expected = report["expected"]
    result.fired = report["fired"]
    result.lost = report["lost"] + report["pending"] + report["hidden"]
    result.committed_twice = report["duplicates"]
    result.audit_lateness_ms = report.get("lateness_ms") or {}
    result.findings = report.get("findings", [])[:10]
    result.unfinished = sum(1 for f in report.get("findings", []) if f["kind"] == "unreported")


def _lateness(observations: list[Observation], start: datetime, end: datetime) -> dict[str, float]:
    first: dict[str, Observation] = {}
    for seen in observations:
        if start.timestamp() <= seen.nominal_at < end.timestamp():
            first.setdefault(seen.run_id, seen)
    return percentiles([(o.seen_at - o.due_at) * 1000 for o in first.values()])
