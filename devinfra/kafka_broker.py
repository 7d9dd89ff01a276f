"""A real Apache Kafka broker on loopback, from Kafka's own Maven Central artifacts, no Docker.

The broker runs in KRaft combined mode (one node is both controller and broker). The data
directory holds the formatted storage, the broker's config, its pid and its logs. The cluster of
several nodes, optionally secured, is `kafka_cluster.py`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kairos.devinfra.kafka_runtime import (
    DEFAULT_CACHE_ROOT,
    KAFKA_VERSION,
    LOCAL_BROKER_SETTINGS,
    KafkaRuntime,
    LocalKafkaError,
    broker_answers,
    free_port,
    new_cluster_id,
    pid_is_broker,
    port_is_free,
    stop_pids,
    write_properties,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "KAFKA_VERSION",
    "BrokerStatus",
    "LocalKafka",
    "LocalKafkaError",
    "broker_answers",
]

logger = logging.getLogger(__name__)

DEFAULT_DATA_DIR = (
    Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "kairos" / "kafka"
)


@dataclass(frozen=True)
class BrokerStatus:
    """What a caller needs to know about the local broker."""

    running: bool
    bootstrap_servers: str | None
    pid: int | None
    data_dir: Path

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "server.log"


class LocalKafka:
    """One single-node KRaft broker, its cached artifacts and its data directory."""

    def __init__(
        self,
        data_dir: Path = DEFAULT_DATA_DIR,
        cache_root: Path = DEFAULT_CACHE_ROOT,
        port: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.requested_port = port
        self.runtime = KafkaRuntime(cache_root)
        self._state_file = data_dir / "broker.json"

    def ensure_artifacts(self) -> None:
        """Resolve the broker's jars with Maven once; later calls reuse the cache."""
        self.runtime.ensure_artifacts()

    # -- state -------------------------------------------------------------------------------

    def _read_state(self) -> dict[str, int]:
        try:
            state: dict[str, int] = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {}
        return state

    def status(self) -> BrokerStatus:
        state = self._read_state()
        pid = state.get("pid")
        if pid is not None and pid_is_broker(pid):
            return BrokerStatus(True, f"127.0.0.1:{state['port']}", pid, self.data_dir)
        return BrokerStatus(False, None, None, self.data_dir)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> tuple[BrokerStatus, bool]:
        """Start the broker unless one already runs here; returns (status, started_now)."""
        current = self.status()
        if current.running:
            return current, False
        self.ensure_artifacts()
        port, controller_port = self._choose_ports()
        config = self._write_config(port, controller_port)
        self._format_storage(config)
        log_dir = self.data_dir / "logs"
        process = self.runtime.launch(config, log_dir, ["-Xms256m", "-Xmx1g", "-XX:+UseG1GC"])
        self._state_file.write_text(
            json.dumps({"pid": process.pid, "port": port, "controller_port": controller_port})
        )
        bootstrap = f"127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LocalKafkaError(
                    f"the broker exited with code {process.returncode} during start-up; "
                    f"see {log_dir / 'server.log'} and {log_dir / 'stdout.log'}"
                )
            if broker_answers(bootstrap, timeout_s=1.0):
                logger.info(
                    "local Kafka %s answers at %s (pid %d)", KAFKA_VERSION, bootstrap, process.pid
                )
                return BrokerStatus(True, bootstrap, process.pid, self.data_dir), True
            time.sleep(0.2)
        self.stop()
        raise LocalKafkaError(
            f"the broker did not answer at {bootstrap} within {timeout_s:.0f}s; "
            f"see {log_dir / 'server.log'}"
        )

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL after `timeout_s`); True if one ran."""
        current = self.status()
        if not current.running or current.pid is None:
            return False
        stop_pids([current.pid], timeout_s)
        # Keep the ports (the voter set remembers the controller's); forget only the pid.
        state = self._read_state()
        state.pop("pid", None)
        self._state_file.write_text(json.dumps(state))
        return True

    # -- helpers -----------------------------------------------------------------------------

    def _choose_ports(self) -> tuple[int, int]:
        if self.requested_port is not None:
            if not port_is_free(self.requested_port):
                raise LocalKafkaError(
                    f"port {self.requested_port} is already in use; pick another with --port "
                    "or omit it to use a free port"
                )
            port = self.requested_port
        else:
            previous = self._read_state().get("port")
            port = previous if previous is not None and port_is_free(previous) else free_port()
        # The KRaft voter set remembers the controller's endpoint, so keep its port across restarts.
        previous_controller = self._read_state().get("controller_port")
        if (
            previous_controller is not None
            and previous_controller != port
            and port_is_free(previous_controller)
        ):
            return port, previous_controller
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
        return port, controller_port

    def _write_config(self, port: int, controller_port: int) -> Path:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
            "log.dirs": str(self.data_dir / "log"),
            # One node: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            **LOCAL_BROKER_SETTINGS,
        }
        config = self.data_dir / "server.properties"
        write_properties(config, settings)
        return config

    def _format_storage(self, config: Path) -> None:
        if (self.data_dir / "log" / "meta.properties").exists():
            return
        result = subprocess.run(
            self.runtime.format_command(config, new_cluster_id(), "--standalone"),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise LocalKafkaError(
                f"formatting KRaft storage in {self.data_dir / 'log'} failed: "
                f"{(result.stdout + result.stderr)[-2000:]}"
            )
