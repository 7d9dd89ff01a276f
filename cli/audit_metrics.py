"""`kairos audit verify --metrics-file`: the audit's verdict as Prometheus text, for the
node_exporter textfile collector (or any scraper of a file), so that a scheduled audit pages
when the promise breaks (`KairosAuditBreach`) or when it stops running (`KairosAuditStale`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from kairos.core.audit_report import AuditReport, FindingKind, Verdict


def write_audit_metrics(path: Path, report: AuditReport) -> None:
    """Replace `path` with the report's metrics, whole: a scraper never reads half a file."""
    registry = CollectorRegistry()
    Gauge(
        "kairos_audit_last_run_timestamp_seconds",
        "When the last audit was made (its as-of instant), Unix seconds.",
        registry=registry,
    ).set(report.as_of.timestamp())
    Gauge(
        "kairos_audit_window_end_timestamp_seconds",
        "The end of the last audit's window of nominal instants, Unix seconds.",
        registry=registry,
    ).set(report.end.timestamp())
    verdicts = Gauge(
        "kairos_audit_verdict",
        "The last audit's verdict: 1 for the one it gave, 0 for the others.",
        ["verdict"],
        registry=registry,
    )
    for each in Verdict:
        verdicts.labels(each.value).set(1 if each is report.verdict else 0)
    findings = Gauge(
        "kairos_audit_findings",
        "The last audit's findings by kind (lost, duplicate, early, ...).",
        ["kind"],
        registry=registry,
    )
    counted = Counter(finding.kind for finding in report.findings)
    for kind in FindingKind:
        findings.labels(kind.value).set(counted[kind])
    write_to_textfile(str(path), registry)
