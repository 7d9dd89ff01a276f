"""Executors report a run's missed deadline once, as a `deadline_missed` run event and a metric;
`kairos runs late` lists those, and the late runs no executor consumed.

An executor process consumes runs the test publishes as a ticker would: one already past its
start deadline when it arrives (delivered twice), one still running at its finish deadline.
"""

from __future__ import annotations

import json
import re
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kairos.cli.reading import text
from kairos.client import KafkaSettings, Schedule, SchedulesClient
from tests.broker.test_executor_dedupe import free_port
from tests.broker.test_schedules_cli import kairos
from tests.helpers import eventually

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic


def deadlines_missed(port: int) -> dict[tuple[str, str], float]:
    """The metric's samples by (owner, deadline): a series per team, never per schedule."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = r'^kairos_executor_deadlines_missed_total\{deadline="(\w+)",owner="([^"]*)"\} (\S+)$'
    return {
        (owner, deadline): float(value)
        for deadline, owner, value in re.findall(pattern, text, re.MULTILINE)
    }


def missed(runs_topic: RunsTopic, run_id: str) -> list[dict[str, Any]]:
    return [
        e for e in runs_topic.events() if e["run_id"] == run_id and e["kind"] == "deadline_missed"
    ]


def test_missed_deadlines_are_reported_once_as_run_events_and_a_metric(
    runs_topic: RunsTopic, launch_executor: Launcher
) -> None:
    port = free_port()
    executor = launch_executor("e1", metrics_port=port)
    executor.wait_for_log("partitions assigned")
    now = datetime.now(UTC).replace(microsecond=0)
    stale = runs_topic.request(
        "billing.stale", now - timedelta(hours=1), {"kind": "noop"}
    ) | {"owner": "billing", "deadline_start_by_ms": 60_000}  # fmt: skip
    slow = runs_topic.request(
        "billing.slow", now, {"kind": "shell", "command": "sleep 8"}
    ) | {"owner": "billing", "deadline_finish_by_ms": 3_000}  # fmt: skip

    runs_topic.publish(stale, slow, stale)

    def both_done() -> bool:
        return all(
            runs_topic.steps(run["run_id"])[-1:] == [("succeeded", 1)] for run in (stale, slow)
        )

    eventually(both_done, timeout_s=60, interval_s=0.5, message="the runs did not succeed")
    [late_start] = missed(runs_topic, stale["run_id"])
    assert late_start["reason"].startswith("start_by missed: not started by ")
    [late_finish] = missed(runs_topic, slow["run_id"])
    assert late_finish["reason"].startswith("finish_by missed: not succeeded by ")
    assert "(running)" in late_finish["reason"]
    kinds = [kind for kind, _ in runs_topic.steps(slow["run_id"])]
    assert kinds.index("deadline_missed") < kinds.index("succeeded")
    assert deadlines_missed(port) == {("billing", "start_by"): 1.0, ("billing", "finish_by"): 1.0}
    listed = json.loads(kairos(runs_topic.settings, "runs", "late", "--json").stdout)
    assert [(row["run_id"], row["deadline"], row["reported_by"]) for row in listed] == [
        (stale["run_id"], "start_by", "e1"),
        (slow["run_id"], "finish_by", "e1"),
    ]


def test_runs_late_lists_a_late_run_no_executor_consumed(
    runs_topic: RunsTopic, kafka_settings: KafkaSettings
) -> None:
    nightly = Schedule.model_validate(
        {"id": "ops.nightly", "cron": "0 2 * * *", "owner": "ops",
         "deadline": {"start_by": "10m", "finish_by": "1h"}}
    )  # fmt: skip
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert_all([nightly], reason="deadlines")
    nominal = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    runs_topic.publish(runs_topic.request("ops.nightly", nominal, {"kind": "noop"}))

    result = kairos(kafka_settings, "runs", "late", "--json")

    assert result.exit_code == 0, result.output
    rows = [
        (r["deadline"], r["due_by"], r["owner"], r["reported_by"])
        for r in json.loads(result.stdout)
    ]
    assert rows == [
        ("start_by", text(nominal + timedelta(minutes=10)), "ops", None),
        ("finish_by", text(nominal + timedelta(hours=1)), "ops", None),
    ]
    table = kairos(kafka_settings, "runs", "late")
    assert "(no executor yet)" in table.stdout
