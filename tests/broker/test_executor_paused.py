"""An executor paused past its lease (SIGSTOP) never leaves its shell job running beside the retry.

Two executor processes share a store; the shell job beats into a journal every 100 ms, and leaves
a process in the background. The executor running the first attempt is stopped with SIGSTOP:
its job must die (the whole process group) before the other executor retries the run, and when
the paused executor is continued its outcome is fenced off and it carries on.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from tests.helpers import eventually

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def beating(journal: Path, background: Path, beats: int) -> dict[str, str]:
    beat = f'echo "$KAIROS_ATTEMPT $KAIROS_EXECUTOR_INSTANCE $(date +%s.%N)" >> {journal}'
    return {
        "kind": "shell",
        "command": f"sleep 300 & echo $! > {background}.$KAIROS_ATTEMPT; "
        f"i=0; while [ $i -lt {beats} ]; do {beat}; sleep 0.1; i=$((i+1)); done",
    }


def beats_by_attempt(journal: Path) -> dict[int, list[float]]:
    seen: dict[int, list[float]] = defaultdict(list)
    for line in journal.read_text().splitlines():
        attempt, _, at = line.split()
        seen[int(attempt)].append(float(at))
    return seen


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_paused_executors_job_dies_before_the_run_is_retried_elsewhere(
    runs_topic: RunsTopic, launch_executor: Launcher, tmp_path: Path
) -> None:
    store_url = sqlite_url(tmp_path / "shared" / "dedupe.sqlite3")
    open_dedupe_store(store_url).close()
    journal, background = tmp_path / "journal", tmp_path / "background"
    journal.touch()
    executors = {
        name: launch_executor(name, dedupe_url=store_url, lease="2s") for name in ("e1", "e2")
    }
    for process in executors.values():
        process.wait_for_log("partitions assigned")
    run = runs_topic.request(
        "paused", NOMINAL, beating(journal, background, 40), retry_backoff_ms=0
    )
    runs_topic.publish(run)
    first_worker = eventually(
        lambda: journal.read_text().split()[1:2], timeout_s=60, message="the job did not start"
    )[0]
    paused = executors[first_worker]
    paused.signal(signal.SIGSTOP)
    try:

        def retried_and_done() -> bool:
            return runs_topic.steps(run["run_id"])[-1:] == [("succeeded", 2)]

        eventually(retried_and_done, timeout_s=90, interval_s=0.5, message="no retry succeeded")
    finally:
        paused.signal(signal.SIGCONT)
    beats = beats_by_attempt(journal)
    assert max(beats[1]) < min(beats[2]), "the paused executor's job ran beside the retry"
    assert not alive(int(Path(f"{background}.1").read_text())), "its background process lives"
    # Continued, it finds the attempt's outcome fenced off: the run is the other executor's.
    paused.wait_for_log(f"attempt 1 no longer belongs to executor {first_worker}")
    log = paused.log()
    assert f"kairos job watchdog: run={run['run_id']} killed process group" in log, log[-3000:]
    assert runs_topic.steps(run["run_id"]) == [
        ("started", 1),
        ("failed", 1),
        ("retrying", 1),
        ("started", 2),
        ("succeeded", 2),
    ]
    for process in executors.values():
        assert process.stop() == 0, process.log()[-3000:]
