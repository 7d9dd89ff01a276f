"""The whole flow on the secured three-broker cluster, each role holding only its own ACLs.

Apply (producer), fire (ticker), execute (executor), verify (auditor) and check the topics
(operator) run as five SCRAM users over TLS, with topics at replication factor 3 and
min.insync.replicas 2; a role missing one of its ACLs is told which one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from click.testing import Result
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from kairos.cli.acls import create_acls
from kairos.cli.app import app
from kairos.streams.kafka.acls import DeploymentNames, Grant, Operation, Resource, Role, role_grants
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from tests.helpers import eventually, sleep_until, unique_name
from tests.processes import ServiceProcess, start_executor, start_ticker

SECOND = timedelta(seconds=1)
SCHEDULES = 6
PERIOD = 2 * SECOND


@dataclass(frozen=True)
class SecuredDeployment:
    settings: KafkaSettings
    properties: Callable[[str], Path]
    users: dict[Role, str]

    def kairos(self, user: str, *args: str) -> Result:
        """`kairos <args>` as `user`, on this deployment."""
        root = ["--bootstrap-servers", self.settings.bootstrap_servers]
        root += ["--topic-prefix", self.settings.topic_prefix, "--timeout", "20"]
        root += ["--schedules-partitions", str(self.settings.schedules_partitions)]
        root += ["--kafka-config", str(self.properties(user))]
        return CliRunner().invoke(app, [*root, *args])

    def env(self, role: Role) -> dict[str, str]:
        return {"KAIROS_KAFKA_CONFIG": str(self.properties(self.users[role]))}


def _deployment(
    bootstrap: str,
    properties: Callable[[str], Path],
    create_user: Callable[..., str],
    admin: AdminClient,
    leave_out: Callable[[Role, Grant], bool] = lambda role, grant: False,
) -> SecuredDeployment:
    """Topics created by the cluster admin; a user per role granted its ACLs but `leave_out`."""
    settings = KafkaSettings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique_name("secured") + ".",
        schedules_partitions=4,
    )
    deployment = SecuredDeployment(settings, properties, {})
    created = deployment.kairos("admin", "topics", "create")
    assert created.exit_code == 0, created.output
    assert "(replication factor 3, min.insync.replicas 2)" in created.output
    names = DeploymentNames.of(settings)
    for role in Role:
        user = create_user(role.value)
        deployment.users[role] = user
        grants = [grant for grant in role_grants(role, names) if not leave_out(role, grant)]
        create_acls(admin, grants, f"User:{user}", 30.0)
    return deployment


def _schedules_file(path: Path, start: datetime) -> Path:
    lines = ["schedules:"]
    for n in range(SCHEDULES):
        lines += [
            f"  - id: secured-{n:02d}",
            f"    every: {PERIOD.seconds}s",
            f'    start_at: "{start:%Y-%m-%dT%H:%M:%SZ}"',
            "    owner: secured-test",
            "    job:",
            "      kind: shell",
            '      command: "true"',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _audit(deployment: SecuredDeployment, start: datetime, end: datetime) -> dict[str, Any]:
    result = deployment.kairos(
        deployment.users[Role.AUDITOR],
        "audit",
        "verify",
        "--from",
        f"{start:%Y-%m-%dT%H:%M:%SZ}",
        "--to",
        f"{end:%Y-%m-%dT%H:%M:%SZ}",
        "--grace",
        "1s",
        "--json",
    )
    assert result.exit_code == 0, result.output[-2000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["outcomes"].get("succeeded", 0) == report["fired"], report["outcomes"]
    return report


def _check_every_role(deployment: SecuredDeployment) -> None:
    for role, user in deployment.users.items():
        checked = deployment.kairos(user, "acls", role.value, "--check")
        assert checked.exit_code == 0, checked.output


def _ticker_and_executor(deployment: SecuredDeployment, tmp_path: Path) -> list[ServiceProcess]:
    """A ticker as the ticker's user and an executor as the executor's."""
    settings = deployment.settings
    return [
        start_ticker(settings, "t1", tmp_path / "t1", tmp_path, env=deployment.env(Role.TICKER)),
        start_executor(
            settings, "e1", tmp_path / "e1", tmp_path, env=deployment.env(Role.EXECUTOR)
        ),
    ]


def test_the_whole_flow_runs_on_the_secured_cluster_with_each_role_holding_only_its_acls(
    cluster_bootstrap: str,
    cluster_properties_file: Callable[[str], Path],
    cluster_create_user: Callable[..., str],
    cluster_admin: AdminClient,
    tmp_path: Path,
) -> None:
    deployment = _deployment(
        cluster_bootstrap, cluster_properties_file, cluster_create_user, cluster_admin
    )
    _check_every_role(deployment)
    start = datetime.now(UTC).replace(microsecond=0) + 20 * SECOND
    schedules = str(_schedules_file(tmp_path / "s.yaml", start))
    applied = deployment.kairos(deployment.users[Role.PRODUCER], "apply", "-f", schedules)
    assert applied.exit_code == 0, applied.output
    services = _ticker_and_executor(deployment, tmp_path)
    try:
        services[0].wait_for_log("handover event=assigned", timeout_s=90)
        end = start + 10 * SECOND
        sleep_until(end + SECOND)
        report = eventually(
            partial(_audit, deployment, start, end),
            timeout_s=90,
            interval_s=2,
            message="runs lost or not executed on the secured cluster",
        )
    finally:
        codes = [service.stop() for service in services]
    assert codes == [0, 0], [service.log()[-3000:] for service in services]
    expected = SCHEDULES * -(-(end - start) // PERIOD)
    assert (report["expected"], report["fired"]) == (expected, expected), report
    assert (report["lost"], report["duplicates"], report["unexpected"]) == (0, 0, 0)
    checked = deployment.kairos(deployment.users[Role.OPERATOR], "topics", "check")
    assert checked.exit_code == 0, checked.output
    assert "replication factor 3, min.insync.replicas 2, 3 broker(s)" in checked.output
    for service in services:
        # Every grant the roles used was in their lists: no refusal, not even a warning.
        assert "authorization failed" not in service.log().lower(), service.log()[-3000:]


def _left_out(role: Role, grant: Grant) -> bool:
    """One ACL each of the ticker, the producer and the executor is missing."""
    return (role, grant.resource, grant.operation, grant.name.rsplit(".", 1)[-1]) in {
        (Role.TICKER, Resource.TOPIC, Operation.WRITE, "runs"),
        (Role.PRODUCER, Resource.TOPIC, Operation.WRITE, "schedules"),
        (Role.EXECUTOR, Resource.GROUP, Operation.READ, "executors"),
    }


def test_a_role_missing_one_acl_is_told_which_and_does_nothing(
    cluster_bootstrap: str,
    cluster_properties_file: Callable[[str], Path],
    cluster_create_user: Callable[..., str],
    cluster_admin: AdminClient,
    tmp_path: Path,
) -> None:
    deployment = _deployment(
        cluster_bootstrap, cluster_properties_file, cluster_create_user, cluster_admin, _left_out
    )
    layout = deployment.settings.layout
    applied = deployment.kairos(
        deployment.users[Role.PRODUCER],
        "apply",
        "-f",
        str(_schedules_file(tmp_path / "s.yaml", datetime.now(UTC))),
    )
    assert applied.exit_code == 2
    schedules = layout.name(TopicRole.SCHEDULES)
    assert f"it needs WRITE on topic {schedules}." in applied.output, applied.output
    assert "kairos acls producer --principal User:<name> --apply" in applied.output

    ticker = start_ticker(
        deployment.settings, "t1", tmp_path / "t1", tmp_path, env=deployment.env(Role.TICKER)
    )
    executor = start_executor(
        deployment.settings, "e1", tmp_path / "e1", tmp_path, env=deployment.env(Role.EXECUTOR)
    )
    try:
        codes = [service.process.wait(timeout=90) for service in (ticker, executor)]
    finally:
        for service in (ticker, executor):
            service.stop()
    assert codes == [2, 2], [ticker.log()[-3000:], executor.log()[-3000:]]
    runs = layout.name(TopicRole.RUNS)
    assert "the ticker is not authorized" in ticker.log()
    assert f"it needs WRITE on topic {runs}." in ticker.log(), ticker.log()[-3000:]
    group = deployment.settings.deployment_id("executors")
    assert f"it needs READ on group {group}." in executor.log(), executor.log()[-3000:]


def test_a_refusal_the_start_up_check_cannot_foresee_is_named_when_it_happens(
    cluster_bootstrap: str,
    cluster_properties_file: Callable[[str], Path],
    cluster_create_user: Callable[..., str],
    cluster_admin: AdminClient,
    tmp_path: Path,
) -> None:
    """Transactional ids are not described to their users: the first init_transactions is."""
    deployment = _deployment(
        cluster_bootstrap,
        cluster_properties_file,
        cluster_create_user,
        cluster_admin,
        lambda role, grant: grant.resource is Resource.TRANSACTIONAL_ID,
    )
    ticker = start_ticker(
        deployment.settings, "t1", tmp_path / "t1", tmp_path, env=deployment.env(Role.TICKER)
    )
    try:
        code = ticker.process.wait(timeout=90)
    finally:
        ticker.stop()
    log = ticker.log()
    assert code == 2, log[-3000:]
    prefix = DeploymentNames.of(deployment.settings).transactional_id_prefix
    assert "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)" in log, log[-3000:]
    assert f"it needs WRITE on transactional-id {prefix} (prefixed)." in log, log[-3000:]
