"""The `kairos` command against a broker that does not answer, and secrets in its settings.

Real processes: librdkafka writes its own log straight to file descriptor 2, which only a real
process's stderr shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kairos.streams.kafka.settings import KafkaSettings
from tests.processes import start_ticker

FILE_SECRET = "file-secret-8c1f2e"
ENV_SECRET = "env-secret-4b7d90"
CLOSED = "127.0.0.1:1"


def kairos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kairos.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def secrets(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A properties file holding one secret and an environment holding another."""
    path = tmp_path / "client.properties"
    path.write_text(f"# test\nsasl.password={FILE_SECRET}\n", encoding="utf-8")
    return path, {"KAIROS_KAFKA_SSL_KEY_PASSWORD": ENV_SECRET}


def assert_no_secret(text: str) -> None:
    assert FILE_SECRET not in text and ENV_SECRET not in text, text


def test_a_broker_that_does_not_answer_is_one_line_within_the_timeout() -> None:
    for command in (["schedules", "list"], ["partitions"], ["runs", "list"], ["topics", "create"]):
        started = time.monotonic()
        result = kairos("--bootstrap-servers", CLOSED, "--timeout", "2", *command)
        elapsed = time.monotonic() - started
        assert result.returncode == 2, result
        lines = result.stderr.splitlines()
        assert lines == [lines[0]], f"{command}: more than one line:\n{result.stderr}"
        assert lines[0].startswith(
            f"error: no Kafka broker answered at {CLOSED} (from --bootstrap-servers) within 2s"
        ), lines
        assert "--kafka-config" in lines[0] and "--timeout" in lines[0]
        assert result.stdout == ""
        # The interpreter's start-up is most of the rest.
        assert elapsed < 12, f"{command} took {elapsed:.1f}s"


def test_the_error_says_where_the_address_came_from(tmp_path: Path) -> None:
    from_environment = kairos(
        "--timeout", "1", "schedules", "list", env={"KAIROS_BOOTSTRAP_SERVERS": CLOSED}
    )
    assert f"at {CLOSED} (from KAIROS_BOOTSTRAP_SERVERS)" in from_environment.stderr
    path = tmp_path / "client.properties"
    path.write_text(f"bootstrap.servers={CLOSED}\n", encoding="utf-8")
    from_file = kairos("--kafka-config", str(path), "--timeout", "1", "schedules", "list")
    assert f"at {CLOSED} (from bootstrap.servers in {path}:1)" in from_file.stderr


def test_secrets_never_show_in_output_help_or_a_services_log(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    path, env = secrets(tmp_path)
    connection = ["--kafka-config", str(path), "--topic-prefix", kafka_settings.topic_prefix]
    failing = kairos(
        *connection, "--bootstrap-servers", CLOSED, "--timeout", "1", "schedules", "list", env=env
    )
    assert failing.returncode == 2
    assert_no_secret(failing.stdout + failing.stderr)
    succeeding = kairos(
        *connection,
        "--bootstrap-servers",
        kafka_settings.bootstrap_servers,
        "topics",
        "create",
        env=env,
    )
    assert succeeding.returncode == 0, succeeding.stderr
    assert "all topics exist" in succeeding.stdout
    assert_no_secret(succeeding.stdout + succeeding.stderr)
    helped = kairos(*connection, "--help", env=env)
    assert helped.returncode == 0
    assert_no_secret(helped.stdout + helped.stderr)

    service_env = {**env, "KAIROS_KAFKA_CONFIG": str(path)}
    ticker = start_ticker(
        kafka_settings, "t1", tmp_path / "t1", tmp_path, log_level="DEBUG", env=service_env
    )
    try:
        ticker.wait_for_log("handover event=assigned")
    finally:
        assert ticker.stop() == 0, ticker.log()[-3000:]
    log = ticker.log()
    assert_no_secret(log)
    # The properties did reach the service: its log names them, redacted.
    assert "'sasl.password': '[redacted]'" in log
    assert "'ssl.key.password': '[redacted]'" in log
