"""The deploy files' environments start real Kairos processes against a real broker.

Kubernetes, Docker Compose and systemd configure Kairos by environment variables alone. Each test
takes the variables from a file as its platform would set them (a ConfigMap and the pod's name, a
compose service, a unit's EnvironmentFile and `Environment=` lines with their specifiers), changes
only what differs on this machine (broker, topic prefix, paths, a free port, the group: tests
share one broker), runs the command with no flags, and checks what the platform relies on: the
instance name it gave is the group member's, the state dir it gave is used, the endpoint the
probes and health checks call answers, the shipped client properties file is accepted, and
SIGTERM ends the process with exit 0 within the grace period the file allows.
"""

from __future__ import annotations

import re
import signal
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient

from kairos.services.executor.fleet import advertised_client_id, advertised_store
from kairos.streams.settings import KafkaSettings
from tests.helpers import eventually
from tests.processes import ServiceProcess

REPOSITORY = Path(__file__).resolve().parents[2]
KUBERNETES = REPOSITORY / "deploy" / "kubernetes"
SYSTEMD = REPOSITORY / "deploy" / "systemd"
COMPOSE = REPOSITORY / "compose" / "docker-compose.yml"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _kubernetes(file_name: str, kind: str) -> dict[str, Any]:
    (found,) = [
        d for d in yaml.safe_load_all((KUBERNETES / file_name).read_text()) if d["kind"] == kind
    ]
    return found


def _kubernetes_environment(workload: dict[str, Any], pod_name: str) -> dict[str, str]:
    """ConfigMap variables, then the container's own, as the kubelet resolves them."""
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    environment = dict(_kubernetes("settings.yaml", "ConfigMap")["data"])
    for variable in container["env"]:
        if "value" in variable:
            environment[variable["name"]] = variable["value"]
        else:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            environment[variable["name"]] = pod_name
    return environment


def _shipped_client_properties(tmp_path: Path) -> Path:
    secret = _kubernetes("kafka-client-secret.example.yaml", "Secret")
    path = tmp_path / "client.properties"
    path.write_text(secret["stringData"]["client.properties"])
    return path


def _systemd_environment(unit: str, instance: str, state_root: Path, credentials: Path) -> dict:
    """The unit's environment: its EnvironmentFile (the shipped kairos.env), then `Environment=`."""
    environment = dict(
        line.split("=", 1)
        for line in (SYSTEMD / "kairos.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    specifiers = {"%i": instance, "%S": str(state_root), "%d": str(credentials)}
    for line in (SYSTEMD / unit).read_text().splitlines():
        if line.startswith("Environment="):
            name, value = line.removeprefix("Environment=").split("=", 1)
            environment[name] = re.sub(r"%[iSd]", lambda m: specifiers[m[0]], value)
    return environment


# Tests share one broker: each deployment's processes get a group of their own.
GROUP_VARIABLES = {"KAIROS_TICKER_GROUP": "tickers", "KAIROS_EXECUTOR_GROUP": "executors"}


def _on_this_machine(
    environment: dict[str, str], settings: KafkaSettings, tmp_path: Path, group_variable: str
) -> tuple[dict[str, str], int]:
    port = _free_port()
    local = {
        **environment,
        "KAIROS_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "KAIROS_TOPIC_PREFIX": settings.topic_prefix,
        "KAIROS_SCHEDULES_PARTITIONS": str(settings.schedules_partitions),
        "KAIROS_METRICS_PORT": str(port),
        group_variable: settings.topic_prefix + GROUP_VARIABLES[group_variable],
    }
    if local.get("KAIROS_STATE_DIR", "").startswith("/var/lib/kairos"):
        local["KAIROS_STATE_DIR"] = str(tmp_path / "state")
    if "KAIROS_KAFKA_CONFIG" in local and not Path(local["KAIROS_KAFKA_CONFIG"]).exists():
        local["KAIROS_KAFKA_CONFIG"] = str(_shipped_client_properties(tmp_path))
    return local, port


def _metric(port: int, name: str) -> float | None:
    """The probe's request: GET /metrics; the sample's value, if the process exports it yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as response:
            assert response.status == 200
            text = response.read().decode()
    except OSError:
        return None  # not listening yet: a probe failure, retried as the kubelet would
    match = re.search(rf"^{name} (\S+)$", text, flags=re.MULTILINE)
    return float(match[1]) if match else None


def _group_members(bootstrap: str, group_id: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_consumer_groups([group_id]).values()
    return {member.client_id for member in future.result(timeout=10).members}


def _stops_cleanly_within(process: ServiceProcess, grace_s: float) -> None:
    started = time.monotonic()
    process.signal(signal.SIGTERM)
    code = process.stop(timeout_s=grace_s)
    elapsed = time.monotonic() - started
    assert code == 0, f"exit {code} after SIGTERM:\n{process.log()[-3000:]}"
    assert elapsed < grace_s


def _never_left_running(process: ServiceProcess) -> None:
    if process.process.poll() is None:
        process.kill()


def _run_ticker(
    environment: dict[str, str],
    instance: str,
    grace_s: float,
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    local, port = _on_this_machine(environment, kafka_settings, tmp_path, "KAIROS_TICKER_GROUP")
    ticker = ServiceProcess(["ticker"], tmp_path / "ticker.log", env=local)
    try:
        owned = eventually(
            lambda: _metric(port, "kairos_ticker_owned_partitions") == 4,
            timeout_s=90,
            interval_s=0.5,
            message="the ticker took no partitions (or its metrics do not answer)",
        )
        assert owned
        members = _group_members(kafka_settings.bootstrap_servers, local["KAIROS_TICKER_GROUP"])
        assert members == {instance}
        stores = Path(local["KAIROS_STATE_DIR"]) / f"{kafka_settings.topic_prefix}schedules"
        assert sorted(p.name for p in stores.iterdir()) == ["0", "1", "2", "3"]
        _stops_cleanly_within(ticker, grace_s)
    finally:
        _never_left_running(ticker)


def test_the_kubernetes_ticker_runs_as_its_pod_and_stops_within_its_grace(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    stateful_set = _kubernetes("ticker.yaml", "StatefulSet")
    pod = "kairos-ticker-0"
    _run_ticker(
        _kubernetes_environment(stateful_set, pod),
        pod,
        stateful_set["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        kafka_settings,
        tmp_path,
    )


def test_the_compose_ticker_runs_under_its_name_and_stops_within_its_grace(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    service = yaml.safe_load(COMPOSE.read_text())["services"]["ticker-a"]
    environment = {name: str(value) for name, value in service["environment"].items()}
    # The image sets the state dir (compose/Dockerfile's ENV).
    environment["KAIROS_STATE_DIR"] = "/var/lib/kairos"
    grace_s = float(service["stop_grace_period"].removesuffix("s"))
    _run_ticker(environment, "ticker-a", grace_s, kafka_settings, tmp_path)


def test_the_systemd_ticker_runs_as_its_unit_instance_and_stops_within_its_timeout(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    # LoadCredential= copies /etc/kairos/kafka.properties into the credentials directory.
    (credentials / "kafka.properties").write_text((SYSTEMD / "kafka.properties").read_text())
    environment = _systemd_environment(
        "kairos-ticker@.service", "t1", tmp_path / "var-lib", credentials
    )
    assert environment["KAIROS_STATE_DIR"] == str(tmp_path / "var-lib" / "kairos" / "ticker-t1")
    timeout = re.search(
        r"^TimeoutStopSec=(\d+)s$", (SYSTEMD / "kairos-ticker@.service").read_text(), re.M
    )
    assert timeout
    _run_ticker(environment, "t1", float(timeout[1]), kafka_settings, tmp_path)


def test_the_kubernetes_executor_runs_on_postgresql_and_stops_within_its_grace(
    kafka_settings: KafkaSettings, postgres_url: str, tmp_path: Path
) -> None:
    deployment = _kubernetes("executor.yaml", "Deployment")
    pod = "kairos-executor-5d8f7c9b4-x2k7q"
    environment = _kubernetes_environment(deployment, pod)
    # envFrom the kairos-dedupe Secret, pointing at this machine's PostgreSQL.
    secret = _kubernetes("dedupe-secret.example.yaml", "Secret")["stringData"]
    environment.update({**secret, "KAIROS_DEDUPE_URL": postgres_url})
    local, port = _on_this_machine(environment, kafka_settings, tmp_path, "KAIROS_EXECUTOR_GROUP")
    executor = ServiceProcess(["executor"], tmp_path / "executor.log", env=local)
    try:
        (member,) = eventually(
            lambda: _group_members(
                kafka_settings.bootstrap_servers, local["KAIROS_EXECUTOR_GROUP"]
            ),
            timeout_s=90,
            interval_s=0.5,
            message="the executor did not join its group",
        )
        # An executor's client id is its instance name, then the id of the store it uses.
        assert member == advertised_client_id(pod, advertised_store(member) or "")
        assert _metric(port, "kairos_executor_attempts_in_flight") == 0
        _stops_cleanly_within(
            executor, deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        )
    finally:
        _never_left_running(executor)
