"""A real executor's kafka jobs write their team's namespace and the topics the runtime policy
lists for it, and no other team's topic nor Kairos's own, although the executor's principal
could."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kairos.streams.kafka.topics import TopicRole
from tests.helpers import eventually
from tests.kafka_helpers import read_topic

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def test_a_teams_kafka_jobs_write_its_own_and_listed_topics_only(
    runs_topic: RunsTopic,
    launch_executor: Launcher,
    create_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    own, listed, other = (
        create_topic(name) for name in ("growth.signups", "shared.events", "payments.refunds")
    )
    policy = tmp_path / "runtime-policy.yaml"
    policy.write_text(f"teams: {{growth: {{kafka_topics: ['{listed}']}}}}\n")
    # A team named like the deployment's prefix owns that namespace, in which Kairos's own
    # topics are: a job of it writing run events would forge any team's outcomes.
    events_topic = runs_topic.settings.layout.name(TopicRole.RUN_EVENTS)
    forger = runs_topic.settings.topic_prefix.rstrip(".")
    runs = {
        topic: runs_topic.request(
            f"to-{topic}",
            NOMINAL,
            {"kind": "kafka", "topic": topic, "payload": "hi"},
            max_attempts=1,
        )
        for topic in (own, listed, other, events_topic)
    }
    for topic, run in runs.items():
        run["owner"] = forger if topic == events_topic else "growth"
    executor = launch_executor("e1", env={"KAIROS_RUNTIME_POLICY": str(policy)})
    runs_topic.publish(*runs.values())

    def outcomes() -> dict[str, str]:
        ended = {
            e["run_id"]: e.get("reason") or e["kind"]
            for e in runs_topic.events()
            if e["kind"] in {"succeeded", "failed"}
        }
        assert len(ended) == len(runs), ended
        return ended

    ended = eventually(outcomes, timeout_s=60, interval_s=0.5, message="the runs did not end")
    assert executor.stop() == 0, executor.log()[-3000:]
    assert ended[runs[own]["run_id"]] == "succeeded"
    assert ended[runs[listed]["run_id"]] == "succeeded"
    assert ended[runs[other]["run_id"]] == (
        f"team growth may not write topic {other}; its kafka jobs write growth.* and the topics "
        "an administrator lists in teams.growth.kafka_topics of the executor's runtime policy "
        f"(now: {listed})"
    )
    assert ended[runs[events_topic]["run_id"]].startswith(
        f"topic {events_topic} belongs to Kairos (this deployment's prefix "
    )
    bootstrap = runs_topic.settings.bootstrap_servers
    assert read_topic(bootstrap, own) == [(runs[own]["run_id"], b"hi")]
    assert read_topic(bootstrap, other) == []
    assert b"hi" not in [value for _, value in read_topic(bootstrap, events_topic)]
