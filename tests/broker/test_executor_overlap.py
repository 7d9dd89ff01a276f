"""Overlap policies across executor processes, with jobs that outlast their schedule's period.

Runs are published once a second, as a ticker fires an `every: 1s` schedule. Each schedule's
runs land on partitions of both executors (its id is picked for that), so different executors
admit them and only the shared store can apply the policy. `replace` is checked too: the running
run is stopped (its shell killed) before its replacement starts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kairos.core.run_id import run_id
from kairos.streams.kafka.partitioner import partition_for
from tests.helpers import eventually, sleep_until
from tests.kafka_helpers import wait_for_stable_group

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic
    from tests.processes import ServiceProcess


def final_events(runs_topic: RunsTopic, runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each run's last event, once every run has ended (succeeded or skipped)."""
    wanted = {r["run_id"] for r in runs}

    def ended() -> dict[str, dict[str, Any]]:
        last = {e["run_id"]: e for e in runs_topic.events() if e["run_id"] in wanted}
        pending = {
            run_id
            for run_id in wanted
            if last.get(run_id, {}).get("kind") not in ("succeeded", "skipped")
        }
        assert not pending, f"not ended yet: {sorted(pending)}"
        return last

    return eventually(ended, timeout_s=60, interval_s=0.5, message="runs did not end")


def wait_for_steps(runs_topic: RunsTopic, run_id: str, last: str) -> list[tuple[str, int]]:
    def ended() -> list[tuple[str, int]]:
        steps = runs_topic.steps(run_id)
        assert steps[-1:] and steps[-1][0] == last, f"{run_id}: {steps}"
        return steps

    return eventually(ended, timeout_s=60, interval_s=0.5, message=f"{run_id} never {last}")


def started(runs_topic: RunsTopic, run_id: str) -> datetime:
    return next(
        e["started_at"]
        for e in runs_topic.events()
        if e["run_id"] == run_id and e["kind"] == "started"
    )


def across_executors(
    name: str, start: datetime, seconds: Iterable[int], owners: dict[str, set[int]], partitions: int
) -> str:
    """A schedule id whose runs at `start + seconds` are admitted by more than one executor: the
    partitions their run ids land on are owned by different members of the group."""
    owner_of = {partition: owner for owner, held in owners.items() for partition in held}
    nominals = [start + timedelta(seconds=second) for second in seconds]
    for n in itertools.count():
        candidate = f"{name}-{n}"
        admitters = {
            owner_of[partition_for(run_id(candidate, nominal), partitions)] for nominal in nominals
        }
        if len(admitters) > 1:
            return candidate
    raise AssertionError("unreachable: itertools.count() never ends")


@dataclass(frozen=True)
class OverlapRuns:
    """Runs of schedules fired once a second from `start`, whose runs the group's `owners`
    (executor to the runs partitions it holds) admit on more than one executor."""

    runs_topic: RunsTopic
    start: datetime
    owners: dict[str, set[int]]

    def schedule(self, name: str, seconds: Iterable[int]) -> str:
        partitions = self.runs_topic.settings.layout.runs_partitions
        return across_executors(name, self.start, seconds, self.owners, partitions)

    def run(self, schedule_id: str, second: int, command: str, overlap: str) -> dict[str, Any]:
        nominal = self.start + timedelta(seconds=second)
        job = {"kind": "shell", "command": command}
        return self.runs_topic.request(schedule_id, nominal, job, overlap=overlap)


def stable_owners(runs_topic: RunsTopic, executors: list[ServiceProcess]) -> dict[str, set[int]]:
    """The runs partitions each executor holds, once the group has settled.

    Queued runs start in the order they are delivered: publish only once no rebalance can hold
    one partition back while another delivers.
    """
    for process in executors:
        process.wait_for_log("partitions assigned")
    settings = runs_topic.settings
    return wait_for_stable_group(
        settings.bootstrap_servers, f"{settings.topic_prefix}executors", members=len(executors)
    )


def publish_at_their_nominal_instants(
    runs_topic: RunsTopic, runs: list[dict[str, Any]], *, with_the_first: list[dict[str, Any]]
) -> None:
    """Publish each run at its nominal instant, as a ticker fires them; `with_the_first` goes
    out together with the first one."""
    for index, run in enumerate(runs):
        sleep_until(run["nominal_at"])
        runs_topic.publish(run, *(with_the_first if index == 0 else []))


def until_file_exists(path: Path) -> str:
    """A shell command that runs until `path` exists."""
    return f"while [ ! -e {path} ]; do sleep 0.1; done"


def assert_skipped_while_running(
    runs_topic: RunsTopic, later: list[dict[str, Any]], running: dict[str, Any]
) -> None:
    ends = final_events(runs_topic, later)
    for run in later:
        assert ends[run["run_id"]]["kind"] == "skipped"
        assert ends[run["run_id"]]["reason"] == (
            f"overlap policy skip: run {running['run_id']} of the schedule is still running"
        )


def assert_succeeded(runs_topic: RunsTopic, run: dict[str, Any]) -> None:
    assert final_events(runs_topic, [run])[run["run_id"]]["kind"] == "succeeded"


def assert_ran_one_at_a_time_in_nominal_order(
    runs_topic: RunsTopic, queueing: list[dict[str, Any]]
) -> None:
    """Queued runs wait for the previous one, then start in nominal order, one at a time."""
    ends = final_events(runs_topic, queueing)
    assert {e["kind"] for e in ends.values()} == {"succeeded"}
    spans = [(started(runs_topic, r["run_id"]), ends[r["run_id"]]["finished_at"]) for r in queueing]
    for (_, previous_end), (next_start, _) in itertools.pairwise(spans):
        assert next_start >= previous_end, spans


def assert_stopped_before_its_replacement_started(
    runs_topic: RunsTopic, replaced: dict[str, Any], replacement: dict[str, Any]
) -> None:
    assert wait_for_steps(runs_topic, replacement["run_id"], "succeeded") == [
        ("started", 1),
        ("succeeded", 1),
    ]
    assert runs_topic.steps(replaced["run_id"]) == [("started", 1), ("failed", 1)]
    stopped = next(
        e
        for e in runs_topic.events()
        if e["run_id"] == replaced["run_id"] and e["kind"] == "failed"
    )
    assert stopped["reason"] == f"overlap policy replace: replaced by run {replacement['run_id']}"
    assert started(runs_topic, replacement["run_id"]) >= stopped["finished_at"]


def test_skip_queue_and_replace_hold_across_executors_when_jobs_outlast_the_period(
    runs_topic: RunsTopic, launch_executor: Launcher, store_url: str, tmp_path: Path
) -> None:
    executors = [launch_executor(name, dedupe_url=store_url) for name in ("e1", "e2")]
    try:
        owners = stable_owners(runs_topic, executors)
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        plan = OverlapRuns(runs_topic, start, owners)
        queuer = plan.schedule("queuer", range(4))
        skipper = plan.schedule("skipper", (0, 1, 2, 3, 10))
        replacer = plan.schedule("replacer", (0, 1))

        # Each queued run takes two periods: every later run arrives while one is unfinished.
        queueing = [plan.run(queuer, second, "sleep 2", "queue") for second in range(4)]
        # The first skipper run lasts until the test releases it, however slow this machine is.
        release = tmp_path / "release-the-first-skipper-run"
        first_skip = plan.run(skipper, 0, until_file_exists(release), "skip")
        replaced = plan.run(replacer, 0, "sleep 60", "replace")
        publish_at_their_nominal_instants(
            runs_topic, queueing, with_the_first=[first_skip, replaced]
        )
        # The later runs of these two must find their first run running: they are fired once it
        # is seen running.
        for first in (first_skip, replaced):
            wait_for_steps(runs_topic, first["run_id"], "started")
        later_skips = [plan.run(skipper, second, "true", "skip") for second in (1, 2, 3)]
        replacement = plan.run(replacer, 1, "true", "replace")
        runs_topic.publish(*later_skips, replacement)

        # The first run outlasts the next three periods: they are skipped, never dropped.
        assert_skipped_while_running(runs_topic, later_skips, running=first_skip)
        release.touch()
        assert_succeeded(runs_topic, first_skip)
        # Once it has ended, the next run starts again.
        after = plan.run(skipper, 10, "true", "skip")
        runs_topic.publish(after)
        assert_succeeded(runs_topic, after)

        assert_ran_one_at_a_time_in_nominal_order(runs_topic, queueing)
        assert_stopped_before_its_replacement_started(runs_topic, replaced, replacement)
    finally:
        for process in executors:
            assert process.stop() == 0, process.log()[-3000:]
