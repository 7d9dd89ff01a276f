"""`kairos dev kafka`: the local broker a fresh machine starts with one command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kairos.devinfra.kafka_broker import LocalKafka

KAIROS = [sys.executable, "-c", "from kairos.cli.app import main; main()"]


def _kairos(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [*KAIROS, *args], capture_output=True, text=True, env=env, timeout=180, check=False
    )


def _java_pids_for(data_dir: Path) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-f", f"kafka.Kafka {data_dir}"], capture_output=True, text=True, check=False
    )
    return found.stdout.split()


def test_start_status_second_start_and_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka"
    started = _kairos("dev", "kafka", "start", "--data-dir", str(data_dir))
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip().splitlines()[-1]
    try:
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert topics.brokers, "the printed address must answer a metadata request"

        status = _kairos("dev", "kafka", "status", "--data-dir", str(data_dir))
        assert status.returncode == 0
        assert bootstrap in status.stdout

        again = _kairos("dev", "kafka", "start", "--data-dir", str(data_dir))
        assert again.returncode == 0
        assert "already running" in again.stderr
        assert again.stdout.strip() == bootstrap
        assert len(_java_pids_for(data_dir)) == 1
    finally:
        stopped = _kairos("dev", "kafka", "stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0
    assert "stopped" in stopped.stdout
    assert _java_pids_for(data_dir) == []
    assert (data_dir / "logs" / "server.log").stat().st_size > 0

    after = _kairos("dev", "kafka", "status", "--data-dir", str(data_dir))
    assert after.returncode == 1
    assert "not running" in after.stdout


def test_restart_reuses_cached_artifacts_without_maven(tmp_path: Path) -> None:
    LocalKafka(data_dir=tmp_path / "unused").ensure_artifacts()
    # Only java and this Python on PATH: a start that tried to resolve with Maven would fail.
    java = subprocess.run(["which", "java"], capture_output=True, text=True, check=True)
    no_maven_path = os.pathsep.join(
        [str(Path(java.stdout.strip()).resolve().parent), str(Path(sys.executable).parent), "/bin"]
    )
    data_dir = tmp_path / "kafka"
    started = _kairos("dev", "kafka", "start", "--data-dir", str(data_dir), path=no_maven_path)
    try:
        assert started.returncode == 0, started.stderr
    finally:
        _kairos("dev", "kafka", "stop", "--data-dir", str(data_dir))


def test_missing_java_says_what_to_install(tmp_path: Path) -> None:
    result = _kairos(
        "dev",
        "kafka",
        "start",
        "--data-dir",
        str(tmp_path / "kafka"),
        path=str(Path(sys.executable).parent),
    )
    assert result.returncode == 2
    assert "`java` was not found" in result.stderr
    assert "Install a Java 17+ runtime" in result.stderr
    assert "Traceback" not in result.stderr
