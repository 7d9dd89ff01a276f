"""Overlap policies across executor processes, with jobs that outlast their schedule's period.

Runs are published once a second, as a ticker fires an `every: 1s` schedule. Each schedule's
runs land on partitions of both executors (its id is picked for that), so different executors
admit them and only the shared store can apply the policy. `replace` is checked too: the running
run is stopped (its shell killed) before its replacement starts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kairos.core.run_id import run_id
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.partitioner import partition_for
from tests.helpers import eventually, sleep_until
from tests.kafka_helpers import wait_for_stable_group

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "shared" / "dedupe.sqlite3")
        open_dedupe_store(url).close()
        return url
    shared: str = request.getfixturevalue("postgres_url")
    return shared


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


def test_skip_queue_and_replace_hold_across_executors_when_jobs_outlast_the_period(
    runs_topic: RunsTopic, launch_executor: Launcher, store_url: str, tmp_path: Path
) -> None:
    executors = [launch_executor(name, dedupe_url=store_url) for name in ("e1", "e2")]
    try:
        for process in executors:
            process.wait_for_log("partitions assigned")
        # Queued runs start in the order they are delivered: publish only once no rebalance
        # can hold one partition back while another delivers.
        settings = runs_topic.settings
        owners = wait_for_stable_group(
            settings.bootstrap_servers, f"{settings.topic_prefix}executors", members=2
        )
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)

        def schedule(name: str, seconds: Iterable[int]) -> str:
            return across_executors(name, start, seconds, owners, settings.layout.runs_partitions)

        queuer = schedule("queuer", range(4))
        skipper = schedule("skipper", (0, 1, 2, 3, 10))
        replacer = schedule("replacer", (0, 1))

        def run(schedule_id: str, second: int, command: str, overlap: str) -> dict[str, Any]:
            nominal = start + timedelta(seconds=second)
            job = {"kind": "shell", "command": command}
            return runs_topic.request(schedule_id, nominal, job, overlap=overlap)

        # Each queued run takes two periods: every later run arrives while one is unfinished.
        queueing = [run(queuer, second, "sleep 2", "queue") for second in range(4)]
        # The first skipper run lasts until the test releases it, however slow this machine is.
        release = tmp_path / "release-the-first-skipper-run"
        hold = f"while [ ! -e {release} ]; do sleep 0.1; done"
        skipping = [run(skipper, 0, hold, "skip")]
        replacing = [run(replacer, 0, "sleep 60", "replace")]
        for second, queued in enumerate(queueing):
            sleep_until(queued["nominal_at"])
            runs_topic.publish(queued, *(skipping + replacing if second == 0 else []))
        # The later runs of these two must find their first run running: they are fired once it
        # is seen running.
        for first in (skipping[0], replacing[0]):
            wait_for_steps(runs_topic, first["run_id"], "started")
        skipping += [run(skipper, second, "true", "skip") for second in (1, 2, 3)]
        replacing.append(run(replacer, 1, "true", "replace"))
        runs_topic.publish(*skipping[1:], replacing[1])

        # The first run outlasts the next three periods: they are skipped, never dropped.
        skip_ends = final_events(runs_topic, skipping[1:])
        for later in skipping[1:]:
            assert skip_ends[later["run_id"]]["kind"] == "skipped"
            assert skip_ends[later["run_id"]]["reason"] == (
                f"overlap policy skip: run {skipping[0]['run_id']} of the schedule is still running"
            )
        release.touch()
        assert final_events(runs_topic, skipping[:1])[skipping[0]["run_id"]]["kind"] == "succeeded"
        # Once it has ended, the next run starts again.
        after = runs_topic.request(
            skipper,
            start + timedelta(seconds=10),
            {"kind": "shell", "command": "true"},
            overlap="skip",
        )
        runs_topic.publish(after)
        assert final_events(runs_topic, [after])[after["run_id"]]["kind"] == "succeeded"

        queue_ends = final_events(runs_topic, queueing)
        assert {e["kind"] for e in queue_ends.values()} == {"succeeded"}
        # Queued runs wait for the previous one, then start in nominal order, one at a time.
        spans = [
            (started(runs_topic, r["run_id"]), queue_ends[r["run_id"]]["finished_at"])
            for r in queueing
        ]
        for (_, previous_end), (next_start, _) in itertools.pairwise(spans):
            assert next_start >= previous_end, spans
        replaced, replacement = replacing
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
        assert stopped["reason"] == (
            f"overlap policy replace: replaced by run {replacement['run_id']}"
        )
        assert started(runs_topic, replacement["run_id"]) >= stopped["finished_at"]
    finally:
        for process in executors:
            assert process.stop() == 0, process.log()[-3000:]
