"""Executors refuse a fleet that could execute a run twice: separate stores in one group, or a
store that forgets runs before the runs topic drops them. Real processes, the real broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kairos.services.executor.fleet import SeparateStoresError, StoreGuard, advertised_client_id
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from tests.helpers import eventually
from tests.processes import ServiceProcess
from tests.shell_jobs import alive, descendants

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
# The job's effect is its last command, and it waits for the test to open the gate: an attempt
# killed before the gate opens leaves no line, while one that ended before the kill (its effect
# taken, its outcome not yet recorded) would be retried, which is at-least-once by design
# (docs/executors.md), not what this test is about.
APPEND_AFTER_GATE = "until [ -e {gate} ]; do sleep 0.05; done; echo $KAIROS_RUN_ID >> {ledger}"


def exit_code(process: ServiceProcess, timeout_s: float = 60) -> int:
    code = eventually(
        lambda: process.process.poll() is not None and (process.process.returncode,),
        timeout_s=timeout_s,
        interval_s=0.2,
        message="the executor did not exit",
    )
    return int(code[0])


def test_an_executor_on_another_store_is_refused_by_the_group(
    runs_topic: RunsTopic, launch_executor: Launcher, tmp_path: Path
) -> None:
    # Each in its own state directory: two SQLite files, as on two hosts.
    first = launch_executor("e1")
    try:
        first.wait_for_log("partitions assigned")
        second = launch_executor("e2")
        assert exit_code(second) != 0
        log = second.log()
        assert "whose dedupe store is not this executor's" in log, log[-3000:]
        assert "--dedupe-url postgresql://" in log
        assert "partitions assigned" not in log, "it joined before refusing"
        same_store = launch_executor("e3", state_dir=tmp_path / "e1")
        same_store.wait_for_log("partitions assigned")
        assert same_store.stop() == 0, same_store.log()[-3000:]
    finally:
        assert first.stop() == 0, first.log()[-3000:]


def test_executors_sharing_a_store_execute_each_run_once_when_one_is_killed_mid_job(
    runs_topic: RunsTopic, launch_executor: Launcher, postgres_url: str, tmp_path: Path
) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    ledger.touch()
    executors = {name: launch_executor(name, dedupe_url=postgres_url) for name in ("e1", "e2")}
    survivors = list(executors.values())
    try:
        for process in executors.values():
            process.wait_for_log("partitions assigned")
        job = {"kind": "shell", "command": APPEND_AFTER_GATE.format(gate=gate, ledger=ledger)}
        batch = [runs_topic.request(f"fleet-{n:02d}", NOMINAL, job) for n in range(12)]
        runs_topic.publish(*batch)
        running = eventually(
            lambda: [e for e in runs_topic.events() if e["kind"] == "started"],
            timeout_s=60,
            message="no run started",
        )
        victim = executors[running[0]["executor_instance"]]
        doomed = descendants(victim.pid)
        assert len(doomed) >= 2, "the victim's job watchdog and its started job run below it"
        victim.kill()
        survivors.remove(victim)
        # Its jobs end with it (their supervisors' death signal, its watchdog), moments after,
        # not in the same instant: the gate opens once they are gone, so a line added by a job
        # that outlived its executor fails the test below, and none races the gate.
        eventually(
            lambda: not any(alive(pid) for pid in doomed),
            timeout_s=30,
            message="a job of the killed executor outlived it",
        )
        gate.touch()
        ids = sorted(run["run_id"] for run in batch)
        eventually(
            lambda: sorted(ledger.read_text().split()) == ids,
            timeout_s=90,
            interval_s=0.5,
            message="not every run took effect",
        )

        def all_succeeded() -> bool:
            events = runs_topic.events()
            return {e["run_id"] for e in events if e["kind"] == "succeeded"} == set(ids)

        eventually(all_succeeded, timeout_s=60, interval_s=0.5, message="runs did not succeed")
    finally:
        for process in survivors:
            assert process.stop() == 0, process.log()[-3000:]
    assert sorted(ledger.read_text().split()) == ids, "a run took effect twice"


def test_a_store_that_forgets_runs_before_the_runs_topic_drops_them_is_refused(
    runs_topic: RunsTopic, launch_executor: Launcher
) -> None:
    forgetful = launch_executor("e1", dedupe_retention="30d")
    assert exit_code(forgetful) != 0
    log = forgetful.log()
    assert "the dedupe store forgets finished runs after 30d" in log, log[-3000:]
    assert f"{runs_topic.runs} keeps its records for 90d (retention.ms=7776000000)" in log
    assert "Set --dedupe-retention to at least" in log
    remembering = launch_executor("e2", dedupe_retention="91d")
    remembering.wait_for_log("partitions assigned")
    assert remembering.stop() == 0, remembering.log()[-3000:]


def test_executors_on_two_stores_starting_together_never_both_execute(
    runs_topic: RunsTopic, launch_executor: Launcher, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    ledger.touch()
    # Started side by side, both may pass the check before joining; each then sees the other
    # at its assignment, and one that never ran alone on its store stops before it admits. When
    # both first see the group with the other in it, both stop (CI saw it): safe, and the error
    # names the fix.
    pair = [launch_executor(name) for name in ("e1", "e2")]
    job = {"kind": "shell", "command": f"echo $KAIROS_RUN_ID >> {ledger}"}
    batch = [runs_topic.request(f"race-{n:02d}", NOMINAL, job) for n in range(12)]
    runs_topic.publish(*batch)

    def settled() -> bool:
        exited = sum(p.process.poll() is not None for p in pair)
        return exited == 2 or (exited == 1 and len(ledger.read_text().split()) == len(batch))

    try:
        eventually(settled, timeout_s=90, interval_s=0.5, message="the pair did not settle")
    except AssertionError as failure:
        logs = "\n".join(f"--- {p.log()[-2000:]}" for p in pair)
        raise AssertionError(f"{failure}; their logs:\n{logs}") from None
    refused = [p for p in pair if p.process.poll() is not None]
    for process in refused:
        assert process.process.returncode != 0
        assert "whose dedupe store is not this executor's" in process.log(), process.log()[-3000:]
    lines = ledger.read_text().split()
    assert len(lines) == len(set(lines)), "a run executed twice"
    if len(refused) == 2:
        assert lines == [], "an executor that refused had executed runs"
    for process in pair:
        if process not in refused:
            assert process.stop() == 0, process.log()[-3000:]


def test_at_an_assignment_only_an_executor_that_never_ran_alone_on_its_store_stops(
    runs_topic: RunsTopic, tmp_path: Path
) -> None:
    settings = runs_topic.settings
    group = f"{settings.topic_prefix}executors"
    store = open_dedupe_store(sqlite_url(tmp_path / "dedupe.sqlite3"))
    admin = AdminClient(settings.consumer_config())
    newcomer = StoreGuard(admin, group, store, lingering=timedelta(0))
    established = StoreGuard(admin, group, store, lingering=timedelta(0))
    established.check_assignment()  # the group is empty: it runs alone on its store
    other = Consumer(
        settings.group_member_config(group, advertised_client_id("elsewhere", "0" * 32), 3000)
    )
    try:
        other.subscribe([runs_topic.runs])
        eventually(lambda: other.poll(0.2) is None and other.assignment(), timeout_s=60)
        with pytest.raises(SeparateStoresError) as refused:
            newcomer.check_assignment()
        assert refused.value.member == advertised_client_id("elsewhere", "0" * 32)
        established.check_assignment()  # logged, not raised: the newcomer is the one to stop
    finally:
        other.close()
        store.close()
