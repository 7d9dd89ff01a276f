"""Real ticker and executor processes serve `/readyz`, `/livez` and `/metrics` on this host only.

What makes `/livez` fail (a loop that stopped turning) cannot be done to a real process without
stopping its server too (SIGSTOP stops every thread): tests/local/test_probe_server.py holds a
real ticker loop in-process instead.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kairos.services.build import DISTRIBUTION
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import create_topics
from tests.helpers import eventually, unique_name
from tests.probe_client import ANOTHER_LOOPBACK, free_port, get
from tests.processes import ServiceProcess, start_executor, start_ticker


def _ready(process: ServiceProcess, port: int) -> None:
    eventually(
        lambda: get(port, "/readyz") == (200, "ok\n"),
        timeout_s=60,
        interval_s=0.2,
        message=f"{process.log_path.name} never ready: {get(port, '/readyz')}",
    )


def _owned_partitions(port: int) -> int:
    found = re.search(r"^kairos_ticker_owned_partitions (\S+)$", get(port, "/metrics")[1], re.M)
    assert found, "no kairos_ticker_owned_partitions yet"
    return int(float(found[1]))


def test_tickers_and_an_executor_are_ready_once_joined_a_standby_too_on_this_host_only(
    kafka_bootstrap: str, admin: AdminClient, tmp_path: Path
) -> None:
    # One schedules partition for two tickers: one of them is a standby, assigned nothing.
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=unique_name("kairos") + ".",
        schedules_partitions=1,
    )
    create_topics(admin, settings.layout)
    ports = {name: free_port() for name in ("t1", "t2", "e1")}
    processes = {
        name: start_ticker(settings, name, tmp_path / name, tmp_path, metrics_port=ports[name])
        for name in ("t1", "t2")
    }
    processes["e1"] = start_executor(
        settings, "e1", tmp_path / "e1", tmp_path, metrics_port=ports["e1"]
    )
    try:
        for name, process in processes.items():
            port = ports[name]
            _ready(process, port)
            assert get(port, "/livez") == (200, "ok\n")
            status, metrics = get(port, "/metrics")
            assert status == 200
            assert f'kairos_build_info{{version="{version(DISTRIBUTION)}"}} 1.0' in metrics
            status, why = get(port, "/readyz", host=ANOTHER_LOOPBACK)
            assert status == 0 and "refused" in why, f"{name} listens on more than 127.0.0.1"
        owned = eventually(
            lambda: sorted(_owned_partitions(ports[name]) for name in ("t1", "t2")) == [0, 1],
            timeout_s=30,
            message="one ticker owns the partition, the other stands by",
        )
        assert owned
        assert all(get(ports[name], "/readyz")[0] == 200 for name in ("t1", "t2"))
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
    assert codes == {"t1": 0, "t2": 0, "e1": 0}, "\n".join(
        p.log()[-2000:] for p in processes.values()
    )
