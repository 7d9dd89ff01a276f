"""Two executor processes share the work through the store; a SIGKILLed one's run moves over.

Each shell job writes a journal line when it starts and when it ends, with the executor that
ran it, so the test can see every attempt's interval: no run may ever run twice at once.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.helpers import eventually
from tests.processes import ServiceProcess

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
LEASE_S = 2


def journalled(journal: Path, seconds: float) -> dict[str, str]:
    line = f'"$KAIROS_RUN_ID $KAIROS_ATTEMPT $KAIROS_EXECUTOR_INSTANCE $(date +%s.%N)" >> {journal}'
    return {"kind": "shell", "command": f"echo start {line}; sleep {seconds}; echo end {line}"}


Attempt = dict[str, float | str]
"""An attempt's `worker`, and its `start` and (if it ended) `end` instants (epoch seconds)."""


def attempts(journal: Path) -> dict[tuple[str, int], Attempt]:
    """(run id, attempt) → the attempt, from the journal its job wrote."""
    seen: dict[tuple[str, int], Attempt] = defaultdict(dict)
    for line in journal.read_text().splitlines():
        edge, run_id, attempt, worker, at = line.split()
        seen[run_id, int(attempt)].update({edge: float(at), "worker": worker})
    return seen


def assert_never_twice_at_once(journal: Path, killed_at: float = float("inf")) -> None:
    by_run: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (run_id, _), seen in attempts(journal).items():
        # An attempt without an end was killed with its executor.
        by_run[run_id].append((float(seen["start"]), float(seen.get("end", killed_at))))
    for run_id, spans in by_run.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start > end, f"{run_id} ran twice at once: {spans}"


def launch_sharing_executors(
    launch_executor: Launcher, store_url: str
) -> dict[str, ServiceProcess]:
    """e1 and e2 on one store, three jobs at once each, a short lease;
    `$KAIROS_EXECUTOR_INSTANCE` names each in its jobs' journal lines."""
    executors = {
        name: launch_executor(
            name,
            dedupe_url=store_url,
            lease=f"{LEASE_S}s",
            concurrency=3,
        )
        for name in ("e1", "e2")
    }
    for process in executors.values():
        process.wait_for_log("partitions assigned")
    return executors


def assert_a_batch_is_shared_and_never_run_twice_at_once(
    runs_topic: RunsTopic, journal: Path
) -> None:
    batch = [
        runs_topic.request(f"batch-{n:02d}", NOMINAL, journalled(journal, 1)) for n in range(12)
    ]
    runs_topic.publish(*batch)
    eventually(
        lambda: sum(1 for e in runs_topic.events() if e["kind"] == "succeeded") == 12,
        timeout_s=60,
        interval_s=0.5,
        message="the batch did not finish",
    )
    assert {seen["worker"] for seen in attempts(journal).values()} == {"e1", "e2"}, (
        "both executors run work"
    )
    assert_never_twice_at_once(journal)


def first_attempt(journal: Path, run: dict[str, Any]) -> Attempt:
    """The run's first attempt once its job has started."""
    started: Attempt = eventually(
        lambda: attempts(journal).get((run["run_id"], 1)),
        timeout_s=60,
        message="the long run did not start",
    )
    return started


def wait_until_retried_once(runs_topic: RunsTopic, run: dict[str, Any]) -> list[tuple[str, int]]:
    def retried() -> list[tuple[str, int]]:
        steps = runs_topic.distinct_steps(run["run_id"])
        assert steps[-1:] == [("succeeded", 2)], steps
        return steps

    steps: list[tuple[str, int]] = eventually(retried, timeout_s=60, interval_s=0.5)
    return steps


def assert_retried_elsewhere_once_the_lease_expired(
    runs_topic: RunsTopic, journal: Path, run: dict[str, Any], killed: Attempt, killed_at: float
) -> None:
    """The killed attempt died with its executor, and the other one retried it, but only after
    the lease that the killed one stopped renewing expired; never both at once."""
    seen = attempts(journal)
    assert "end" not in seen[run["run_id"], 1], "the killed attempt's job died with it"
    retry = seen[run["run_id"], 2]
    assert retry["worker"] != killed["worker"]
    # Retried only once the lease expired: at least two thirds of it after the kill, since it
    # was renewed at most a third of a lease before.
    assert float(retry["start"]) - killed_at >= LEASE_S * 2 / 3 - 0.1
    assert_never_twice_at_once(journal, killed_at)
    failed = next(
        e for e in runs_topic.events() if e["run_id"] == run["run_id"] and e["kind"] == "failed"
    )
    assert failed["reason"] == (
        f"lease expired: executor {killed['worker']} stopped renewing it during attempt 1"
    )
    assert failed["finished_at"] - failed["started_at"] >= timedelta(seconds=LEASE_S * 2 / 3)


def test_two_executors_share_runs_and_a_killed_ones_run_is_retried_by_the_other(
    runs_topic: RunsTopic, launch_executor: Launcher, store_url: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    journal.touch()
    executors = launch_sharing_executors(launch_executor, store_url)
    survivors: list[ServiceProcess] = list(executors.values())
    try:
        assert_a_batch_is_shared_and_never_run_twice_at_once(runs_topic, journal)

        long_run = runs_topic.request("long", NOMINAL, journalled(journal, 4), retry_backoff_ms=0)
        runs_topic.publish(long_run)
        first = first_attempt(journal, long_run)
        victim = executors[str(first["worker"])]
        victim.kill()
        killed_at = time.time()
        survivors.remove(victim)
        assert wait_until_retried_once(runs_topic, long_run) == [
            ("started", 1),
            ("failed", 1),
            ("retrying", 1),
            ("started", 2),
            ("succeeded", 2),
        ]
    finally:
        for process in survivors:
            assert process.stop() == 0, process.log()[-3000:]
    assert_retried_elsewhere_once_the_lease_expired(runs_topic, journal, long_run, first, killed_at)
