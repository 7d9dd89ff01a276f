"""Records Kafka refuses never stop an executor: a record too large to dead-letter whole, and an
event larger than its topic accepts, go out as smaller copies and the work behind them goes on.

Real broker, a real executor process; the test lowers the run-events topic's
`max.message.bytes` the way an operator might.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kairos.services.executor.events import COPY_LIMIT
from kairos.streams.kafka.topics import TopicRole
from tests.helpers import eventually

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
# Beyond what the executor's producer sends (message.max.bytes 1,000,000), within what the runs
# topic accepts (1,048,588): copied whole beside the dead letter's fields, it cannot be produced.
HUGE = 1_040_000
EVENTS_MAX_BYTES = 2048


def lower_max_message_bytes(bootstrap: str, topic: str, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_records_the_broker_refuses_are_published_smaller_and_the_executor_keeps_running(
    runs_topic: RunsTopic, launch_executor: Launcher
) -> None:
    settings = runs_topic.settings
    lower_max_message_bytes(
        settings.bootstrap_servers, settings.layout.name(TopicRole.RUN_EVENTS), EVENTS_MAX_BYTES
    )
    big_producer = Producer(
        {"bootstrap.servers": settings.bootstrap_servers, "message.max.bytes": 1_048_000}
    )
    big_producer.produce(runs_topic.runs, key=b"huge", value=b"\xff" * HUGE)
    assert big_producer.flush(30) == 0
    # Fails with 4 KiB of output: its failed event is larger than the run-events topic accepts.
    chatty = runs_topic.request(
        "chatty",
        NOMINAL,
        {"kind": "shell", "command": "head -c 6000 /dev/zero | tr '\\0' x; exit 3"},
        max_attempts=1,
    )
    after = runs_topic.request("after", NOMINAL, {"kind": "noop"})
    runs_topic.publish(chatty, after)
    executor = launch_executor("e1")
    try:
        dead = eventually(
            lambda: [d for d in runs_topic.dead_letters() if d["key"] == b"huge"],
            timeout_s=60,
            interval_s=0.5,
            message="the huge record was not dead-lettered",
        )[0]
        assert dead["value"] == b"\xff" * COPY_LIMIT
        assert dead["reason"].startswith(
            f"[value cut to its first {COPY_LIMIT} of {HUGE} bytes: not replayable from this copy]"
        )

        def steps_of_both() -> bool:
            # Events are published at least once: a batch sent again after a refused record
            # repeats the events that had already gone out.
            chatty_steps = list(dict.fromkeys(runs_topic.steps(chatty["run_id"])))
            after_steps = list(dict.fromkeys(runs_topic.steps(after["run_id"])))
            assert chatty_steps[-1:] == [("dead_lettered", 1)], chatty_steps
            assert after_steps == [("started", 1), ("succeeded", 1)], after_steps
            return True

        eventually(steps_of_both, timeout_s=60, interval_s=0.5, message="events stuck")
        failed = next(
            e
            for e in runs_topic.events()
            if e["run_id"] == chatty["run_id"] and e["kind"] == "failed"
        )
        assert failed["reason"].startswith("[reason of ")
        assert "dropped: refused by Kafka" in failed["reason"]
        assert executor.process.poll() is None, "the executor died"
    finally:
        assert executor.stop() == 0, executor.log()[-3000:]
