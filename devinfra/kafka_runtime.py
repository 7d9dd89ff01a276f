"""What every local Kafka node shares: the cached Maven artifacts, storage formatting, the JVM.

Apache Kafka is resolved once by Maven from Central into a cache outside the repository and
reused by every later start, by the single broker (`kafka_broker.py`) and by the cluster
(`kafka_cluster.py`) alike.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
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

# The broker settings every local node shares, whatever the topology.
LOCAL_BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "8",
    "transaction.state.log.num.partitions": "8",
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


class LocalKafkaError(KairosError):
    """The local broker or cluster could not be set up, started or stopped."""


def require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LocalKafkaError(f"`{name}` was not found on PATH. {install_hint}")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the JVM binds: a port in TIME_WAIT after our own broker stopped is reusable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pid_is_broker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline


def new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def new_directory_id() -> str:
    """A Kafka log directory id: a cluster id that cannot be mistaken for an option, as
    Kafka's own `Uuid.randomUuid` ensures."""
    while (directory_id := new_cluster_id()).startswith("-"):
        pass
    return directory_id


def broker_answers(bootstrap_servers: str, timeout_s: float = 2.0) -> bool:
    """True when a broker at `bootstrap_servers` answers a metadata request."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return bool(metadata.brokers)


def write_properties(path: Path, settings: dict[str, str], mode: int = 0o644) -> None:
    """A Java/librdkafka `key=value` file, created with `mode` before anything is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    # O_CREAT's mode applies only to a new file; an existing one keeps its own.
    os.fchmod(descriptor, mode)
    with os.fdopen(descriptor, "w") as out:
        out.write("".join(f"{key}={value}\n" for key, value in settings.items()))


def stop_pids(pids: Sequence[int], timeout_s: float) -> None:
    """SIGTERM every node at once, wait `timeout_s` for all of them, then SIGKILL the rest."""
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_is_broker(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if pid_is_broker(pid):
            logger.warning("broker pid %d ignored SIGTERM for %.0fs; killing it", pid, timeout_s)
            os.kill(pid, signal.SIGKILL)
            while pid_is_broker(pid):
                time.sleep(0.05)


class KafkaRuntime:
    """The cached Kafka jars and the two things done with them: format storage, run a node."""

    def __init__(self, cache_root: Path = DEFAULT_CACHE_ROOT) -> None:
        self.runtime_dir = cache_root / f"kafka-{KAFKA_VERSION}"

    @property
    def libs_dir(self) -> Path:
        return self.runtime_dir / "libs"

    def artifacts_cached(self) -> bool:
        return (self.runtime_dir / "libs.complete").exists()

    def ensure_artifacts(self) -> None:
        """Resolve the broker's jars with Maven once; later calls reuse the cache."""
        require_tool(
            "java", "Install a Java 17+ runtime (Debian: `apt-get install openjdk-17-jre`)."
        )
        if self.artifacts_cached():
            return
        mvn = require_tool("mvn", "Install Apache Maven (Debian: `apt-get install maven`).")
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

    def format_command(self, config: Path, cluster_id: str, *options: str) -> list[str]:
        """The `kafka-storage format` command line for one node's `config`."""
        return [
            "java",
            # A short-lived tool: the optimising compiler would cost more CPU than it saves.
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{self.libs_dir}/*",
            "kafka.tools.StorageTool",
            "format",
            # One argument: an id may start with "-", which argparse would take for an option.
            f"--cluster-id={cluster_id}",
            "--config",
            str(config),
            *options,
        ]

    def launch(
        self, config: Path, log_dir: Path, jvm_options: Sequence[str]
    ) -> subprocess.Popen[bytes]:
        """Start one node on `config`, logging into `log_dir`; returns at once."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log4j = log_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_TEMPLATE.format(log_file=log_dir / "server.log"))
        with (log_dir / "stdout.log").open("ab") as out:
            return subprocess.Popen(
                [
                    "java",
                    *jvm_options,
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={log4j}",
                    "-cp",
                    f"{self.libs_dir}/*",
                    "kafka.Kafka",
                    str(config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session, so a Ctrl-C meant for the CLI does not kill the node mid-write.
                start_new_session=True,
            )
