"""`pause_on_failure`: after N failed runs in a row the schedule's ticker pauses it, with the
reason, by a normal `paused` event; resuming it restarts the count. The executor holds no key
and reads no schedule for it: it only publishes its run events."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kairos.client import KafkaSettings, Schedule, SchedulesClient
from kairos.streams.readers.held_schedules import StoredSchedule
from tests.helpers import eventually
from tests.processes import start_ticker

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

FAILING = {"kind": "shell", "command": "echo disk full >&2; exit 1"}
COUNTED = "schedule=ops.flaky: 1 of 2 failed runs in a row"


def test_the_ticker_pauses_a_schedule_after_n_failures_in_a_row_and_resume_restarts_the_count(
    runs_topic: RunsTopic, launch_executor: Launcher, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    flaky = Schedule.model_validate(
        {
            "id": "ops.flaky",
            "every": "3s",
            "start_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "owner": "ops",
            "job": FAILING,
            "max_attempts": 1,
            "pause_on_failure": 2,
        }
    )
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    executor = launch_executor("e1")
    client = SchedulesClient(kafka_settings, changed_by="alice")
    try:
        executor.wait_for_log("partitions assigned")
        client.upsert(flaky)

        def paused() -> StoredSchedule | None:
            stored = client.get("ops.flaky")
            return stored if stored.schedule.paused else None

        stored = eventually(paused, timeout_s=60, interval_s=0.5, message="not paused after 2")
        assert ticker.log().count(COUNTED) >= 1, "paused before it counted one failure"
        assert stored.change == "paused"
        assert stored.changed_by == "ticker:t1"
        assert stored.reason is not None
        assert stored.reason.startswith("paused after 2 failed runs in a row: ")
        assert "disk full" in stored.reason
        assert stored.schedule.model_copy(update={"paused": False}) == flaky
        counted_before = ticker.log().count(COUNTED)
        client.resume("ops.flaky", reason="fixed the disk")
        eventually(
            lambda: ticker.log().count(COUNTED) > counted_before,
            timeout_s=60,
            message="the failure after the resume was not counted from 1",
        )
        eventually(paused, timeout_s=60, interval_s=0.5, message="not paused again after 2 more")
    finally:
        client.close()
        ticker.stop()
