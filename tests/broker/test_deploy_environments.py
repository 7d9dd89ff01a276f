"""The compose and systemd files' environments start real Kairos processes against a real broker.

Docker Compose and systemd configure Kairos by environment variables alone. Each test takes the
variables from a file as its platform would set them (a compose service, a unit's `Environment=`
lines with their specifiers and its EnvironmentFile), changes only what differs on this
machine, runs the command with no flags, and checks what the platform relies on: the instance
name it gave is the group member's, the state dir it gave is used, the endpoint the health
checks call answers, and SIGTERM ends the process with exit 0 within the grace period the file
allows. What differs here: the broker, topic prefix, group (tests share one broker), paths, a
free port, and security: this broker is PLAINTEXT, so the files' SASL settings (compose's
`KAIROS_KAFKA_*`, the units' properties file) are left out. The files' principals and
credentials are exercised on the secured cluster, with the Kubernetes files' processes, by
tests/cluster/test_deploy_roles.py.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kairos.streams.kafka.settings import KafkaSettings
from tests.deploy_files import SYSTEMD, compose, systemd_environment
from tests.helpers import eventually
from tests.probe_client import free_port, get
from tests.processes import ServiceProcess

# Tests share one broker: each deployment's processes get a group of their own.
GROUP_VARIABLES = {"KAIROS_TICKER_GROUP": "tickers", "KAIROS_EXECUTOR_GROUP": "executors"}
KAFKA_PROPERTIES = "KAIROS_KAFKA_"


def _on_this_machine(
    environment: dict[str, str], settings: KafkaSettings, tmp_path: Path, group_variable: str
) -> tuple[dict[str, str], int]:
    port = free_port()
    local = {
        **environment,
        "KAIROS_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "KAIROS_TOPIC_PREFIX": settings.topic_prefix,
        "KAIROS_SCHEDULES_PARTITIONS": str(settings.schedules_partitions),
        "KAIROS_METRICS_PORT": str(port),
        group_variable: settings.topic_prefix + GROUP_VARIABLES[group_variable],
    }
    for name in [name for name in local if name.startswith(KAFKA_PROPERTIES)]:
        if name != "KAIROS_KAFKA_CONFIG":
            del local[name]
    if local.get("KAIROS_STATE_DIR", "").startswith("/var/lib/kairos"):
        local["KAIROS_STATE_DIR"] = str(tmp_path / "state")
    return local, port


def _metric(port: int, name: str) -> float | None:
    status, text = get(port, "/metrics")
    if status != 200:
        return None  # not listening yet: retried, as the platform would
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
        eventually(
            lambda: _metric(port, "kairos_ticker_owned_partitions") == 4,
            timeout_s=90,
            interval_s=0.5,
            message="the ticker took no partitions (or its metrics do not answer)",
        )
        # What compose's health check asks; a standby with no partitions would be ready too.
        assert eventually(lambda: get(port, "/readyz")[0] == 200, timeout_s=10)
        members = _group_members(kafka_settings.bootstrap_servers, local["KAIROS_TICKER_GROUP"])
        assert members == {instance}
        stores = Path(local["KAIROS_STATE_DIR"]) / f"{kafka_settings.topic_prefix}schedules"
        assert sorted(p.name for p in stores.iterdir()) == ["0", "1", "2", "3"]
        _stops_cleanly_within(ticker, grace_s)
    finally:
        if ticker.process.poll() is None:
            ticker.kill()


def test_the_compose_ticker_runs_under_its_name_and_stops_within_its_grace(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    service = compose()["services"]["ticker-a"]
    environment = {name: str(value) for name, value in service["environment"].items()}
    assert environment["KAIROS_OWNERSHIP"] == "signed"
    # The image sets the state dir (compose/Dockerfile's ENV).
    environment["KAIROS_STATE_DIR"] = "/var/lib/kairos"
    grace_s = float(service["stop_grace_period"].removesuffix("s"))
    _run_ticker(environment, "ticker-a", grace_s, kafka_settings, tmp_path)


def test_the_systemd_ticker_runs_as_its_unit_instance_and_stops_within_its_timeout(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    # LoadCredential= copies the properties file here; this PLAINTEXT broker needs an empty one.
    (credentials / "kafka.properties").write_text("")
    environment = systemd_environment(
        "kairos-ticker@.service", "t1", tmp_path / "var-lib", credentials
    )
    assert environment["KAIROS_STATE_DIR"] == str(tmp_path / "var-lib" / "kairos" / "ticker-t1")
    assert environment["KAIROS_KAFKA_CONFIG"] == str(credentials / "kafka.properties")
    timeout = re.search(
        r"^TimeoutStopSec=(\d+)s$", (SYSTEMD / "kairos-ticker@.service").read_text(), re.M
    )
    assert timeout
    _run_ticker(environment, "t1", float(timeout[1]), kafka_settings, tmp_path)
