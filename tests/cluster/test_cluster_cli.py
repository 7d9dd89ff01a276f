"""`kairos dev kafka … --brokers 3 --security sasl_ssl`: start, add-user, status, a killed node
restarted, stop, as a user runs them, with a cluster of its own (the session's keeps running)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kairos.devinfra.kafka_cluster import LocalCluster
from tests.helpers import eventually

KAIROS = [sys.executable, "-m", "kairos.cli"]


def _kairos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KAIROS, "dev", "kafka", *args], capture_output=True, text=True, timeout=240, check=False
    )


def _node_pids(data_dir: Path) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-f", f"kafka.Kafka {data_dir}/"], capture_output=True, text=True, check=False
    )
    return found.stdout.split()


def _port_options() -> list[str]:
    """Clear of the session cluster's 9 ports when the tests were given a port range."""
    base = os.environ.get("KAIROS_TEST_CLUSTER_PORT")
    return ["--port", str(int(base) + 10)] if base else []


def _passwords(data_dir: Path) -> list[str]:
    return [
        line.split("=", 1)[1]
        for path in data_dir.glob("client-*.properties")
        for line in path.read_text().splitlines()
        if line.startswith("sasl.password=")
    ]


def _kill_and_restart_node_2(data_dir: Path, start: list[str]) -> list[str]:
    """SIGKILL node 2: status names it, and `start` brings back only it."""
    cluster = LocalCluster.at(data_dir)
    assert cluster is not None
    survivors = {n.pid for n in cluster.status().nodes if n.node_id != 2}
    node_2 = cluster.status().nodes[1].pid
    assert node_2 is not None
    os.kill(node_2, signal.SIGKILL)
    eventually(lambda: str(node_2) not in _node_pids(data_dir), message="node 2 still runs")

    status = _kairos("status", "--data-dir", str(data_dir))
    assert status.returncode == 1
    assert "node 2 at 127.0.0.1:" in status.stdout and "2 of 3 nodes running" in status.stdout

    restarted = _kairos(*start)
    assert restarted.returncode == 0, restarted.stderr
    assert "already running" not in restarted.stderr
    nodes = cluster.status().nodes
    assert all(n.running for n in nodes)
    assert {n.pid for n in nodes if n.node_id != 2} == survivors
    return [status.stdout + status.stderr, restarted.stdout + restarted.stderr]


def test_start_add_user_status_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    start = ["start", "--data-dir", str(data_dir), "--brokers", "3", "--security", "sasl_ssl"]
    started = _kairos(*start, *_port_options())
    outputs = [started.stdout + started.stderr]
    try:
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip().splitlines()[-1]
        assert len(bootstrap.split(",")) == 3
        assert f"{data_dir}/client-admin.properties" in started.stderr
        assert len(_node_pids(data_dir)) == 3

        added = _kairos("add-user", "billing", "--data-dir", str(data_dir))
        outputs.append(added.stdout + added.stderr)
        assert added.returncode == 0, added.stderr
        properties = Path(added.stdout.strip())
        assert properties == data_dir / "client-billing.properties"
        assert stat.S_IMODE(properties.stat().st_mode) == 0o600
        cluster = LocalCluster.at(data_dir)
        assert cluster is not None
        billing = AdminClient(cluster.client_config("billing")).list_topics(timeout=10)
        assert len(billing.brokers) == 3, "the new user must authenticate with its file"

        status = _kairos("status", "--data-dir", str(data_dir))
        outputs.append(status.stdout + status.stderr)
        assert status.returncode == 0, status.stdout
        assert "3 of 3 nodes running, security sasl_ssl" in status.stdout

        outputs += _kill_and_restart_node_2(data_dir, start)
    finally:
        stopped = _kairos("stop", "--data-dir", str(data_dir))
    assert stopped.stdout.strip() == "stopped"
    assert _node_pids(data_dir) == []

    after = _kairos("status", "--data-dir", str(data_dir))
    assert after.returncode == 1
    assert "0 of 3 nodes running" in after.stdout

    logs = [path.read_text() for path in data_dir.glob("node-*/logs/*.log")]
    for password in _passwords(data_dir):
        assert all(password not in text for text in outputs + logs)


def test_a_data_dir_keeps_its_topology(tmp_path: Path) -> None:
    data_dir = tmp_path / "single"
    data_dir.mkdir()
    (data_dir / "broker.json").write_text("{}")

    refused = _kairos("start", "--data-dir", str(data_dir), "--brokers", "3")
    assert refused.returncode == 2
    assert "holds a single local broker, not a cluster; pass another --data-dir" in refused.stderr
    assert "Traceback" not in refused.stderr

    no_cluster = _kairos("add-user", "billing", "--data-dir", str(data_dir))
    assert no_cluster.returncode == 2
    assert "holds no local cluster" in no_cluster.stderr


def test_a_damaged_data_dir_is_named_not_used(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "cluster.json").write_text("{not json")
    status = _kairos("status", "--data-dir", str(corrupt))
    assert status.returncode == 2
    assert f"{corrupt}/cluster.json is not a local cluster's state" in status.stderr
    assert "Traceback" not in status.stderr

    interrupted = tmp_path / "interrupted"
    (interrupted / "node-1" / "log").mkdir(parents=True)
    started = _kairos("start", "--data-dir", str(interrupted), "--brokers", "3")
    assert started.returncode == 2
    assert "an interrupted creation; delete the directory and start again" in started.stderr
    assert _node_pids(interrupted) == []


def test_a_bad_user_name_is_refused_before_anything_else(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    data_dir.mkdir()
    (data_dir / "cluster.json").write_text(
        '{"security": "sasl_ssl", "ports": [[1, 2, 3], [4, 5, 6], [7, 8, 9]]}'
    )
    refused = _kairos("add-user", "../evil", "--data-dir", str(data_dir))
    assert refused.returncode == 2
    assert "user name '../evil' is not allowed: use 1-64 letters, digits" in refused.stderr
    assert list(tmp_path.rglob("*evil*")) == []
