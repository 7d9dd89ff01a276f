"""A team's run never reaches a pool or a handler it may not use, with real executor processes.

Three executors of one deployment, each in its own consumer group: the deployment's (the default
pool, the built-in kinds), the gpu pool's (`--pool gpu --kinds shell`), and payments' (`--handlers`
alone: python jobs only, its handler `issue-refund` registered for payments). A gpu run is run by
the gpu executor alone, a default run by the deployment's alone; payments' own run of its handler
succeeds, and growth's run naming it is dead-lettered with the reason and never calls it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kairos.cli.executor import executor_arguments
from kairos.services.executor.handlers import Handlers, RunContext
from tests.helpers import eventually
from tests.processes import ServiceProcess

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
HANDLERS = "tests.broker.test_executor_placement:handlers"

handlers = Handlers()


@handlers.handler("issue-refund", teams=("payments",))
def issue_refund(run: RunContext) -> None:
    """Notes each call in the file the test names, so a call that should not happen shows."""
    with Path(run.args["calls"]).open("a") as calls:
        calls.write(f"{run.run_id}\n")


def _own_group(
    runs_topic: RunsTopic, tmp_path: Path, instance: str, **options: Any
) -> ServiceProcess:
    """An executor in a consumer group of its own, as a team or a pool runs one."""
    settings = runs_topic.settings
    arguments = executor_arguments(
        settings,
        instance,
        tmp_path / instance,
        group_id=settings.deployment_id(f"executors-{instance}"),
        lease="2s",
        offset_commit_interval="200ms",
        poll_interval="100ms",
        session_timeout_ms=3000,
        **options,
    )
    return ServiceProcess(arguments, tmp_path / f"{instance}.log")


def _ran_by(runs_topic: RunsTopic, run_id: str) -> list[str]:
    """The executors whose attempt of the run succeeded."""
    return [
        e["executor_instance"]
        for e in runs_topic.events()
        if e["run_id"] == run_id and e["kind"] == "succeeded"
    ]


def test_runs_reach_only_the_pools_and_handlers_they_may_use(
    runs_topic: RunsTopic, launch_executor: Launcher, tmp_path: Path
) -> None:
    calls = tmp_path / "refund-calls"
    calls.touch()
    refund = {"kind": "python", "handler": "issue-refund", "args": {"calls": str(calls)}}
    shell = {"kind": "shell", "command": "true"}
    gpu_run = {**runs_topic.request("train", NOMINAL, shell), "pool": "gpu"}
    default_run = runs_topic.request("report", NOMINAL, shell)
    own_refund = {**runs_topic.request("payments-refund", NOMINAL, refund), "owner": "payments"}
    foreign_refund = {**runs_topic.request("growth-refund", NOMINAL, refund), "owner": "growth"}
    runs_topic.publish(gpu_run, default_run, own_refund, foreign_refund)

    executors = [
        launch_executor("shared-1"),
        _own_group(runs_topic, tmp_path, "gpu-1", pool="gpu", kinds="shell"),
        _own_group(runs_topic, tmp_path, "payments-1", handlers=HANDLERS),
    ]
    try:
        eventually(
            lambda: (
                all(
                    _ran_by(runs_topic, run["run_id"]) for run in (gpu_run, default_run, own_refund)
                )
                and any(
                    d["error_class"] == "HandlerNotPermittedError"
                    for d in runs_topic.dead_letters()
                )
            ),
            timeout_s=60,
            interval_s=0.5,
            message="the runs were not run and refused as expected",
        )
    finally:
        codes = [executor.stop() for executor in executors]
    assert codes == [0, 0, 0], [executor.log()[-2000:] for executor in executors]
    assert "serving python jobs only" in executors[2].log()

    assert _ran_by(runs_topic, gpu_run["run_id"]) == ["gpu-1"]
    assert _ran_by(runs_topic, default_run["run_id"]) == ["shared-1"]
    assert _ran_by(runs_topic, own_refund["run_id"]) == ["payments-1"]
    assert calls.read_text().splitlines() == [own_refund["run_id"]]
    (refused,) = runs_topic.dead_letters()
    assert refused["key"] == foreign_refund["run_id"].encode()
    assert (
        "handler issue-refund is registered for teams payments; team growth may not call it"
        in refused["reason"]
    )
    assert runs_topic.steps(foreign_refund["run_id"]) == []
