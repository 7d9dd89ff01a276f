"""Concurrency groups across executor processes: a ticker fires herds, two executors share a store.

Six schedules of `payments` fall due together every 5 s, each job taking a second; `payments` is
limited to 2 runs at once. Two schedules labelled `warehouse=eu` (owned by growth) fire every 2 s
and are limited to 1 at once through growth's label group; `ops` is not limited. Every job writes
its start and end to a ledger: the ledger shows each limited group at its limit and never above it,
while the queued runs are counted in the executors' metrics and by `kairos concurrency list`, and
every run succeeds once.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.core.schedule import parse_schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.readers.history import HistoryReader
from tests.broker.test_executor_dedupe import free_port
from tests.helpers import eventually, sleep_until
from tests.processes import start_ticker

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

HERDS = 3


def _ledgered(ledger: Path) -> dict[str, str]:
    """A shell job that notes its start and end (nanoseconds) around a second's work."""
    note = f'echo "$1 $KAIROS_SCHEDULE_ID $KAIROS_RUN_ID $(date +%s%N)" >> {ledger}'
    return {"kind": "shell", "command": f"sh -c '{note}' - start; sleep 1; sh -c '{note}' - end"}


def _schedules(start: datetime, ledger: Path) -> list[dict[str, object]]:
    at = {"start_at": start.isoformat(), "job": _ledgered(ledger)}
    payments = [{"id": f"payments-{n}", "every": "5s", "owner": "payments", **at} for n in range(6)]
    loaders = [
        {"id": f"loader-{n}", "every": "2s", "owner": "growth", "labels": {"warehouse": "eu"}} | at
        for n in range(2)
    ]
    return [*payments, *loaders, {"id": "ops-0", "every": "1s", "owner": "ops", **at}]


def _most_at_once(ledger: Path, prefix: str) -> int:
    """The most runs of schedules named `prefix`... running at the same time, by the ledger."""
    steps = []
    for line in ledger.read_text().splitlines():
        kind, schedule_id, _, nanoseconds = line.split()
        if schedule_id.startswith(prefix):
            # An end sorts before a start at the same instant: one run handed its place on.
            steps.append((int(nanoseconds), 0 if kind == "end" else 1))
    running = most = 0
    for _, is_start in sorted(steps):
        running += 1 if is_start else -1
        most = max(most, running)
    return most


def _waiting(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = r'^kairos_executor_concurrency_waiting\{group="([^"]*)"\} (\S+)$'
    return {group: float(value) for group, value in re.findall(pattern, text, re.MULTILINE)}


def _concurrency(store_url: str, tmp_path: Path, *args: str) -> str:
    result = CliRunner().invoke(
        app, ["concurrency", *args, "--state-dir", str(tmp_path), "--dedupe-url", store_url]
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_limited_groups_never_run_more_than_their_limit_across_executors(
    runs_topic: RunsTopic, launch_executor: Launcher, store_url: str, tmp_path: Path
) -> None:
    settings = runs_topic.settings
    _concurrency(store_url, tmp_path, "set", "owner:payments", "2")
    _concurrency(store_url, tmp_path, "set", "label:growth/warehouse=eu", "1")
    ledger = tmp_path / "ledger"
    ledger.touch()
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=20)
    with SchedulesClient(settings, changed_by="test") as client:
        client.upsert_all(parse_schedule(raw) for raw in _schedules(start, ledger))
    port = free_port()
    executors = [
        launch_executor("e1", dedupe_url=store_url, metrics_port=port),
        launch_executor("e2", dedupe_url=store_url),
    ]
    ticker = start_ticker(settings, "t1", tmp_path / "t1", tmp_path)
    try:
        ticker.wait_for_log("handover event=assigned", timeout_s=60)
        sleep_until(start)
        eventually(
            lambda: _waiting(port).get("owner:payments", 0) >= 1,
            timeout_s=30,
            interval_s=0.2,
            message="no payments run was counted as waiting behind the limit",
        )
        end = start + timedelta(seconds=5 * HERDS - 1)
        sleep_until(end)
        fired = [r for r in HistoryReader(settings).runs() if r.nominal <= end]
        listed = json.loads(_concurrency(store_url, tmp_path, "list", "--json"))

        def every_fired_run_succeeded() -> Counter[str]:
            done = Counter(
                e.run_id for e in HistoryReader(settings).run_events() if e.kind == "succeeded"
            )
            assert {r.run_id for r in fired} <= set(done), "not all runs succeeded yet"
            return done

        succeeded = eventually(every_fired_run_succeeded, timeout_s=90, interval_s=1)
    finally:
        assert ticker.stop() == 0, ticker.log()[-3000:]
        for executor in executors:
            assert executor.stop() == 0, executor.log()[-3000:]
    assert {r.run_id: succeeded[r.run_id] for r in fired} == {r.run_id: 1 for r in fired}
    assert len([r for r in fired if r.schedule_id.startswith("payments-")]) == 6 * HERDS
    assert (_most_at_once(ledger, "payments-"), _most_at_once(ledger, "loader-")) == (2, 1)
    groups = {g["group"]: (g["max_running"], g["running"]) for g in listed["groups"]}
    assert set(groups) == {"owner:payments", "label:growth/warehouse=eu"}
    assert groups["owner:payments"][1] <= 2 and groups["label:growth/warehouse=eu"][1] <= 1
