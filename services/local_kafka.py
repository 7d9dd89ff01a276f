"""A real Apache Kafka broker on loopback, from Kafka's own Maven Central artifacts, no Docker.

The broker runs in KRaft combined mode (one node is both controller and broker). Artifacts are
resolved once by Maven into a cache outside the repository and reused by every later start; the
data directory holds the formatted storage, the broker's config, its pid and its logs.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kairos.core.errors import KairosError

logger = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.25.3"
# Kafka 4.1 still depends on slf4j-api 1.7; the log4j2 bridge needs the 2.x API beside it.
SLF4J_VERSION = "2.0.17"

DEFAULT_CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kairos"
DEFAULT_DATA_DIR = (
    Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "kairos" / "kafka"
)

_POM_TEMPLATE = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.kairos.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>{kafka}</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>{slf4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2_TEMPLATE = """rootLogger.level=INFO
rootLogger.appenderRef.file.ref=FILE
appender.file.type=File
appender.file.name=FILE
appender.file.fileName={log_file}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
"""


class LocalKafkaError(KairosError):
    """The local broker could not be set up, started or stopped."""


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


def _require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LocalKafkaError(f"`{name}` was not found on PATH. {install_hint}")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the JVM binds: a port in TIME_WAIT after our own broker stopped is reusable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _pid_is_broker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline


def _cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def broker_answers(bootstrap_servers: str, timeout_s: float = 2.0) -> bool:
    """True when a broker at `bootstrap_servers` answers a metadata request."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return bool(metadata.brokers)


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
        self.runtime_dir = cache_root / f"kafka-{KAFKA_VERSION}"
        self._state_file = data_dir / "broker.json"

    # -- artifacts ---------------------------------------------------------------------------

    @property
    def libs_dir(self) -> Path:
        return self.runtime_dir / "libs"

    def artifacts_cached(self) -> bool:
        return (self.runtime_dir / "libs.complete").exists()

    def ensure_artifacts(self) -> None:
        """Resolve the broker's jars with Maven once; later calls reuse the cache."""
        _require_tool(
            "java", "Install a Java 17+ runtime (Debian: `apt-get install openjdk-17-jre`)."
        )
        if self.artifacts_cached():
            return
        mvn = _require_tool("mvn", "Install Apache Maven (Debian: `apt-get install maven`).")
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        pom = self.runtime_dir / "pom.xml"
        pom.write_text(
            _POM_TEMPLATE.format(
                kafka=KAFKA_VERSION, scala=SCALA_VERSION, log4j=LOG4J_VERSION, slf4j=SLF4J_VERSION
            )
        )
        staging = self.runtime_dir / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        logger.info("resolving Kafka %s from Maven Central into %s", KAFKA_VERSION, self.libs_dir)
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={staging}",
                "-DincludeScope=runtime",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise LocalKafkaError(
                f"Maven could not resolve Kafka {KAFKA_VERSION} (exit {result.returncode}); "
                f"check that Maven Central is reachable. Maven said:\n{result.stdout[-2000:]}"
            )
        shutil.rmtree(self.libs_dir, ignore_errors=True)
        staging.rename(self.libs_dir)
        (self.runtime_dir / "libs.complete").write_text(KAFKA_VERSION)

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
        if pid is not None and _pid_is_broker(pid):
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
        with (log_dir / "stdout.log").open("ab") as out:
            process = subprocess.Popen(
                [
                    "java",
                    "-Xms256m",
                    "-Xmx1g",
                    "-XX:+UseG1GC",
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={log_dir / 'log4j2.properties'}",
                    "-cp",
                    f"{self.libs_dir}/*",
                    "kafka.Kafka",
                    str(config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session, so a Ctrl-C meant for the CLI does not kill the broker mid-write.
                start_new_session=True,
            )
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
        pid = current.pid
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _pid_is_broker(pid):
            time.sleep(0.1)
        if _pid_is_broker(pid):
            logger.warning("broker pid %d ignored SIGTERM for %.0fs; killing it", pid, timeout_s)
            os.kill(pid, signal.SIGKILL)
            while _pid_is_broker(pid):
                time.sleep(0.05)
        # Keep the ports (the voter set remembers the controller's); forget only the pid.
        state = self._read_state()
        state.pop("pid", None)
        self._state_file.write_text(json.dumps(state))
        return True

    # -- helpers -----------------------------------------------------------------------------

    def _choose_ports(self) -> tuple[int, int]:
        if self.requested_port is not None:
            if not _port_is_free(self.requested_port):
                raise LocalKafkaError(
                    f"port {self.requested_port} is already in use; pick another with --port "
                    "or omit it to use a free port"
                )
            port = self.requested_port
        else:
            previous = self._read_state().get("port")
            port = previous if previous is not None and _port_is_free(previous) else _free_port()
        # The KRaft voter set remembers the controller's endpoint, so keep its port across restarts.
        previous_controller = self._read_state().get("controller_port")
        if (
            previous_controller is not None
            and previous_controller != port
            and _port_is_free(previous_controller)
        ):
            return port, previous_controller
        controller_port = _free_port()
        while controller_port == port:
            controller_port = _free_port()
        return port, controller_port

    def _write_config(self, port: int, controller_port: int) -> Path:
        log_dir = self.data_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "log4j2.properties").write_text(
            _LOG4J2_TEMPLATE.format(log_file=log_dir / "server.log")
        )
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
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Failover must be testable in seconds, so allow short consumer session timeouts.
            "group.min.session.timeout.ms": "500",
            "group.initial.rebalance.delay.ms": "0",
            # A ticker killed inside a transaction holds back read_committed readers of every
            # partition it wrote to until the broker aborts that transaction: look for expired
            # ones every second instead of every ten (docs/operations.md, "A killed ticker").
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            # Kairos declares every topic it uses; a typo must fail, not create a topic.
            "auto.create.topics.enable": "false",
        }
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return config

    def _format_storage(self, config: Path) -> None:
        if (self.data_dir / "log" / "meta.properties").exists():
            return
        result = subprocess.run(
            [
                "java",
                "-cp",
                f"{self.libs_dir}/*",
                "kafka.tools.StorageTool",
                "format",
                # One argument: an id may start with "-", which argparse would take for an option.
                f"--cluster-id={_cluster_id()}",
                "--config",
                str(config),
                "--standalone",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise LocalKafkaError(
                f"formatting KRaft storage in {self.data_dir / 'log'} failed: "
                f"{(result.stdout + result.stderr)[-2000:]}"
            )
