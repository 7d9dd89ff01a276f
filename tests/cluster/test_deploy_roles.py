"""The Kubernetes files' processes on the secured three-broker cluster, each as its own principal.

Every process gets what the files give it, resolved as the kubelet would: the kairos-settings
ConfigMap, the Secrets and variables of its container, its pod's name, and the client.properties of
the Secret it mounts (kafka-credentials.example.yaml). The principals those name (kairos-admin,
kairos-ticker, kairos-executor, kairos-console, kairos-notifier, team-payments) are created on the
cluster under those names. A super user grants kairos-admin the operator role's ACLs and ALTER on
the cluster, the one step docs/deploy.md puts before the topics Job; the Job's steps then run in
order as kairos-admin and grant every other principal its ACLs. Team payments registers its key and
applies a schedule, signed; the ticker (ownership `signed`) fires it, the executor runs it, the
console comes up, and `kairos audit verify` as the console's principal finds every fire executed
(and none of a schedule the team published unsigned). The notifier, with the example's routes, joins
its group. The systemd units' properties files connect as their roles too.

Substituted, because it must differ on this machine: the bootstrap servers, each properties
file's password (the cluster generated it) and CA path, the topic prefix (the session shares the
cluster), the ports, the state directories, where the console's users file and team keys are
copied to (its init container runs here; `kairos teams keygen` makes the key of team ops for the
example's empty placeholder), where the notifier's routes file and webhook secrets are copied to
(its init container runs here too; the routes name the copies), and the dedupe store's PostgreSQL
URL. The one-shot commands (the Job's steps, keygen, apply, audit) run in this process; the
ticker, executor, console and notifier are processes of their own.
"""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from typer.testing import CliRunner, Result

from kairos.cli.acls import create_acls
from kairos.cli.app import app
from kairos.services.executor.fleet import advertised_client_id, advertised_store
from kairos.services.executor.pool_watch import advertised_pools, pools_tagged
from kairos.streams.kafka.acls import DeploymentNames, Role, role_grants
from kairos.streams.kafka.settings import KafkaSettings
from tests.cluster.conftest import SecureCluster
from tests.deploy_files import (
    by_kind,
    client_properties,
    containers,
    kubernetes_environment,
    local_path,
    mounted_properties,
    pod_templates,
    run_init_containers,
    systemd_credential,
)
from tests.helpers import eventually, sleep_until, unique_name
from tests.postgres import postgres_cluster, postgres_url  # noqa: F401  (the fixtures)
from tests.probe_client import free_port, get
from tests.processes import ServiceProcess

SECOND = timedelta(seconds=1)
PERIOD = 2 * SECOND
WINDOW = 8 * SECOND
# As a StatefulSet and a Deployment name their pods.
POD_NAMES = {
    "kairos-ticker": "kairos-ticker-0",
    "kairos-executor": "kairos-executor-5d8f7c9b4-x2k7q",
    "kairos-console": "kairos-console-7c9d6b5f8-q4m2z",
    "kairos-notifier": "kairos-notifier-6b7d9c8f5-n3v8w",
}
SERVICES = tuple(POD_NAMES)
# Files (and directories of them) the pods' init containers copy out of Secrets, mode 0600.
PRIVATE_FILES = (
    "KAIROS_SIGNING_KEY",
    "KAIROS_CONSOLE_USERS_FILE",
    "KAIROS_TEAM_KEYS",
    "KAIROS_NOTIFIER_ROUTES_FILE",
)
# The metrics servers' ports: the notifier's has a variable of its own.
METRICS_PORTS = ("KAIROS_METRICS_PORT", "KAIROS_NOTIFIER_METRICS_PORT")


class FilesDeployment:
    """The Kubernetes files' deployment on the session's cluster; its files under `root`."""

    def __init__(self, cluster: SecureCluster, root: Path, dedupe_url: str) -> None:
        self.cluster = cluster
        self.root = root
        self.dedupe_url = dedupe_url
        self.settings = KafkaSettings(
            bootstrap_servers=cluster.bootstrap_servers, topic_prefix=unique_name("files") + "."
        )

    def properties(self, written: dict[str, str]) -> Path:
        """A file's client properties, with the password the cluster made for its user."""
        user = written["sasl.username"]
        self.cluster.cluster.add_user(user)
        generated = self.cluster.cluster.client_files.config(user)
        for kept in ("security.protocol", "sasl.mechanism"):
            assert written[kept] == generated[kept], f"the cluster uses {kept}={generated[kept]}"
        local = written | {key: generated[key] for key in ("sasl.password", "ssl.ca.location")}
        path = self.root / f"{user}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in local.items()))
        path.chmod(0o600)
        return path

    def settings_environment(self) -> dict[str, str]:
        return {
            **by_kind("ConfigMap")["kairos-settings"]["data"],
            "KAIROS_BOOTSTRAP_SERVERS": self.settings.bootstrap_servers,
            "KAIROS_TOPIC_PREFIX": self.settings.topic_prefix,
        }

    def environment(self, workload: str, container: dict[str, Any]) -> dict[str, str]:
        """The container's environment with only what must differ here changed."""
        pod = pod_templates()[workload]
        environment = kubernetes_environment(container, POD_NAMES.get(workload, ""))
        environment |= self.settings_environment()
        environment["KAIROS_KAFKA_CONFIG"] = str(
            self.properties(mounted_properties(pod, container))
        )
        own = self.root / workload
        if "KAIROS_STATE_DIR" in environment:
            environment["KAIROS_STATE_DIR"] = str(own / "state")
        for variable in (v for v in METRICS_PORTS if v in environment):
            environment[variable] = str(free_port())
        if "KAIROS_CONSOLE_LISTEN" in environment:
            host = environment["KAIROS_CONSOLE_LISTEN"].rsplit(":", 1)[0]
            environment["KAIROS_CONSOLE_LISTEN"] = f"{host}:{free_port()}"
        if "KAIROS_DEDUPE_URL" in environment:
            environment["KAIROS_DEDUPE_URL"] = self.dedupe_url
        if any(variable in environment for variable in PRIVATE_FILES):
            self.private_copies(pod, container, environment, own / "volumes")
        return environment

    def private_copies(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        environment: dict[str, str],
        root: Path,
    ) -> None:
        """What the pod's init containers copy out of its Secrets, as they copy it, under `root`;
        an empty `<team>.key` is the example's placeholder (console-secret.example.yaml)."""
        directories = run_init_containers(pod, root, self.placeholder_key)
        for variable in (v for v in PRIVATE_FILES if v in environment):
            environment[variable] = str(local_path(container, directories, environment[variable]))
        if "KAIROS_NOTIFIER_ROUTES_FILE" in environment:
            # The routes name their secrets where the container sees the copies: here, these.
            routes = Path(environment["KAIROS_NOTIFIER_ROUTES_FILE"])
            document = yaml.safe_load(routes.read_text())
            for route in (r for team in document["teams"].values() for r in team):
                if "secret_file" in route:
                    route["secret_file"] = str(
                        local_path(container, directories, route["secret_file"])
                    )
            routes.write_text(yaml.safe_dump(document))

    def placeholder_key(self, path: Path) -> None:
        """A key of the team `path` names (`<team>.key`), for an example's empty one."""
        self.keygen(path.stem, path)

    def keygen(self, team: str, path: Path) -> str:
        """A key pair of `team` in `path`; its public key."""
        made = kairos({}, "teams", "keygen", team, "--out", str(path))
        public = re.search(r"^public key: (\S+)$", made.output, flags=re.MULTILINE)
        assert made.exit_code == 0 and public, made.output
        return public[1]

    def admin_environment(self) -> dict[str, str]:
        job = pod_templates()["kairos-topics"]
        return self.environment("kairos-topics", job["containers"][0])


def kairos(environment: dict[str, str], *args: str) -> Result:
    """`kairos <args>` in this process, with `environment` set."""
    return CliRunner().invoke(app, list(args), env=environment)


def _bootstrap_the_administrator(deployment: FilesDeployment, admin: AdminClient) -> None:
    """What a Kafka super user does once, before the topics Job: kairos-admin gets the operator
    role's ACLs and ALTER on the cluster, which creating ACLs needs."""
    job = pod_templates()["kairos-topics"]
    user = mounted_properties(job, job["containers"][0])["sasl.username"]
    deployment.properties(mounted_properties(job, job["containers"][0]))
    principal = f"User:{user}"
    names = DeploymentNames.of(deployment.settings)
    create_acls(admin, role_grants(Role.OPERATOR, names), principal, 30.0)
    alter_cluster = AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        principal,
        "*",
        AclOperation.ALTER,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([alter_cluster], request_timeout=30).values():
        future.result(timeout=30)


def _run_the_topics_job(deployment: FilesDeployment) -> None:
    job = pod_templates()["kairos-topics"]
    for container in containers(job):
        done = kairos(deployment.environment("kairos-topics", container), *container["args"])
        assert done.exit_code == 0, f"{container['name']}: {done.output[-2000:]}"


def _schedule_file(path: Path, schedule_id: str, start: datetime) -> Path:
    path.write_text(
        "schedules:\n"
        f"  - id: {schedule_id}\n"
        f"    every: {PERIOD.seconds}s\n"
        f'    start_at: "{start:%Y-%m-%dT%H:%M:%SZ}"\n'
        "    owner: payments\n"
        "    job: {kind: shell, command: 'true'}\n"
    )
    return path


def _apply_as_the_team(deployment: FilesDeployment, start: datetime) -> None:
    """Team payments, with its Secret's properties and its own key: registered by the
    administrator, then a schedule of its own, signed, and one unsigned, which a ticker in
    `signed` ownership refuses (it never fires, so the audit expects nothing of it)."""
    secret = by_kind("Secret")["kairos-kafka-team-payments"]["stringData"]["client.properties"]
    unsigned = {
        **deployment.settings_environment(),
        "KAIROS_KAFKA_CONFIG": str(deployment.properties(client_properties(secret))),
    }
    signed = unsigned | {"KAIROS_SIGNING_KEY": str(deployment.root / "payments.key")}
    public = deployment.keygen("payments", Path(signed["KAIROS_SIGNING_KEY"]))
    admin = deployment.admin_environment()
    registered = kairos(admin, "teams", "put", "payments", "--public-key", public)
    assert registered.exit_code == 0, registered.output
    for environment, schedule_id in ((signed, "payments.settle"), (unsigned, "payments.forged")):
        schedules = _schedule_file(deployment.root / f"{schedule_id}.yaml", schedule_id, start)
        applied = kairos(environment, "apply", "-f", str(schedules))
        assert applied.exit_code == 0, applied.output


def _start(deployment: FilesDeployment, workload: str) -> tuple[ServiceProcess, dict[str, str]]:
    (container,) = pod_templates()[workload]["containers"]
    environment = deployment.environment(workload, container)
    log = deployment.root / f"{workload}.log"
    return ServiceProcess(container["args"], log, env=environment), environment


def _probe_port(environment: dict[str, str]) -> int:
    listen = environment.get("KAIROS_CONSOLE_LISTEN")
    if listen:
        return int(listen.rsplit(":", 1)[1])
    (port,) = [environment[variable] for variable in METRICS_PORTS if variable in environment]
    return int(port)


def _audit(environment: dict[str, str], start: datetime, end: datetime) -> dict[str, Any]:
    window = [f"{instant:%Y-%m-%dT%H:%M:%SZ}" for instant in (start, end)]
    result = kairos(
        environment,
        "audit",
        "verify",
        "--from",
        window[0],
        "--to",
        window[1],
        "--grace",
        "1s",
        "--json",
    )
    assert result.exit_code == 0, result.output[-2000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["outcomes"].get("succeeded", 0) == report["fired"] > 0, report["outcomes"]
    return report


def _group_members(admin: AdminClient, group: str) -> set[str]:
    (future,) = admin.describe_consumer_groups([group]).values()
    return {member.client_id for member in future.result(timeout=10).members}


def _stop(workload: str, process: ServiceProcess) -> tuple[int, bool]:
    """SIGTERM, as the kubelet sends it: the exit code, and whether it came within the grace."""
    grace_s = pod_templates()[workload]["terminationGracePeriodSeconds"]
    began = time.monotonic()
    process.signal(signal.SIGTERM)
    code = process.stop(timeout_s=grace_s)
    return code, time.monotonic() - began < grace_s


def _systemd_units_connect_as_their_roles(deployment: FilesDeployment) -> None:
    for role in (Role.TICKER, Role.EXECUTOR, Role.NOTIFIER):
        properties = systemd_credential(f"kairos-{role}@.service").read_text()
        environment = {
            **deployment.settings_environment(),
            "KAIROS_KAFKA_CONFIG": str(deployment.properties(client_properties(properties))),
        }
        checked = kairos(environment, "acls", role.value, "--check")
        assert checked.exit_code == 0, checked.output


def test_the_kubernetes_files_run_apply_fire_execute_and_audit_each_as_its_own_principal(
    secure_cluster: SecureCluster,
    cluster_admin: AdminClient,
    postgres_url: str,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    deployment = FilesDeployment(secure_cluster, tmp_path, postgres_url)
    _bootstrap_the_administrator(deployment, cluster_admin)
    _run_the_topics_job(deployment)
    _systemd_units_connect_as_their_roles(deployment)
    started = {workload: _start(deployment, workload) for workload in SERVICES}
    try:
        for workload, (process, environment) in started.items():
            _wait_until_ready(workload, process, _probe_port(environment))
        start = datetime.now(UTC).replace(microsecond=0) + 5 * SECOND
        _apply_as_the_team(deployment, start)
        end = start + WINDOW
        sleep_until(end + SECOND)
        console = started["kairos-console"][1]
        report = eventually(
            partial(_audit, console, start, end),
            timeout_s=60,
            interval_s=2,
            message="runs lost or not executed",
        )
        _check_members(deployment, cluster_admin)
        eventually(
            lambda: get(_probe_port(console), "/api/v1/schedules/payments.settle")[0] == 200,
            timeout_s=30,
            message="the console's view never showed the schedule",
        )
    finally:
        stopped = {workload: _stop(workload, process) for workload, (process, _) in started.items()}
    assert (report["lost"], report["duplicates"], report["unexpected"]) == (0, 0, 0)
    assert report["expected"] == report["fired"] == -(-WINDOW // PERIOD), report
    for workload, (process, _) in started.items():
        assert stopped[workload] == (0, True), f"{workload}: {process.log()[-3000:]}"
        # Every grant the process used was in the Job's: no refusal, not even a warning.
        assert "authorization failed" not in process.log().lower(), process.log()[-3000:]
    # The example's routes, and the secret its webhook signs with, were all taken.
    assert "not used until fixed" not in started["kairos-notifier"][0].log()


def _wait_until_ready(workload: str, process: ServiceProcess, port: int) -> None:
    """As the readiness probe asks: `GET /readyz` until 200."""

    def ready() -> bool:
        if process.process.poll() is not None:
            pytest.fail(f"{workload} exited: {process.log()[-3000:]}")
        return get(port, "/readyz")[0] == 200

    eventually(ready, timeout_s=90, interval_s=0.5, message=f"{workload} never ready")


def _check_members(deployment: FilesDeployment, admin: AdminClient) -> None:
    """Each joined its group under its pod's name (an executor's followed by the pools it
    serves, the default one here, and its store; a notifier may report ready before it joins)."""
    names = DeploymentNames.of(deployment.settings)
    assert _group_members(admin, names.ticker_group) == {POD_NAMES["kairos-ticker"]}
    (member,) = _group_members(admin, names.executor_group)
    pod = POD_NAMES["kairos-executor"]
    assert advertised_pools(member) == {"default"}
    tagged = pools_tagged(pod, {"default"})
    assert member == advertised_client_id(tagged, advertised_store(member) or "")
    notifier = {POD_NAMES["kairos-notifier"]}
    eventually(
        lambda: _group_members(admin, names.notifiers_group) == notifier,
        timeout_s=30,
        message="the notifier never joined its group under its pod's name",
    )
