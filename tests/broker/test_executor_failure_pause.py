"""`pause_on_failure`: after N failed runs in a row the executor pauses the schedule itself, with
the reason, by a normal `paused` event; resuming it restarts the count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from kairos.client import KafkaSettings, Schedule, SchedulesClient
from kairos.streams.held_schedules import StoredSchedule
from tests.helpers import eventually

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

FAILING = {"kind": "shell", "command": "echo disk full >&2; exit 1"}


def test_a_schedule_pauses_itself_after_n_failures_in_a_row_and_resume_restarts_the_count(
    runs_topic: RunsTopic, launch_executor: Launcher, kafka_settings: KafkaSettings
) -> None:
    nightly = Schedule.model_validate(
        {"id": "ops.flaky", "cron": "0 2 * * *", "owner": "ops", "pause_on_failure": 2}
    )
    client = SchedulesClient(kafka_settings, changed_by="alice")
    client.upsert(nightly)
    executor = launch_executor("e1")
    executor.wait_for_log("partitions assigned")
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)

    def fail(minute: int) -> None:
        run = runs_topic.request("ops.flaky", base + timedelta(minutes=minute), FAILING,
                                 max_attempts=1)  # fmt: skip
        runs_topic.publish(run)
        eventually(
            lambda: runs_topic.steps(run["run_id"])[-1:] == [("dead_lettered", 1)],
            timeout_s=60,
            interval_s=0.5,
            message=f"{run['run_id']} was not dead-lettered",
        )

    def paused() -> StoredSchedule | None:
        stored = client.get("ops.flaky")
        return stored if stored.schedule.paused else None

    fail(0)
    executor.wait_for_log("schedule=ops.flaky: 1 of 2 failed runs in a row")
    assert paused() is None
    fail(1)
    stored = eventually(paused, timeout_s=30, interval_s=0.5, message="not paused after 2")
    assert stored.change == "paused"
    assert stored.changed_by == "executor:e1"
    assert stored.reason is not None
    assert stored.reason.startswith("paused after 2 failed runs in a row: ")
    assert "disk full" in stored.reason
    assert stored.schedule.model_copy(update={"paused": False}) == nightly

    client.resume("ops.flaky", reason="fixed the disk")
    fail(2)
    counted = "schedule=ops.flaky: 1 of 2 failed runs in a row"
    eventually(
        lambda: executor.log().count(counted) == 2,
        timeout_s=30,
        message="the failure after the resume was not counted from 1",
    )
    assert paused() is None, "one failure since the resume must not pause"
    fail(3)
    eventually(paused, timeout_s=30, interval_s=0.5, message="not paused again after 2 more")
    client.close()
