"""The system under test: a three-broker cluster, PostgreSQL, two tickers and two executors.

Everything is a real process on loopback that a scenario can kill, stop, restart or starve:
the brokers are `kairos dev kafka`'s combined KRaft nodes (`LocalCluster`), the dedupe store is
a throwaway PostgreSQL (`LocalPostgres`), tickers and executors are `python -m kairos.cli`
processes started with the arguments `kairos dev up` uses. Topics get what production gets on
three brokers: replication factor 3, `min.insync.replicas` 2.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psycopg
from confluent_kafka.admin import AdminClient

from bench.common import free_port, metric, publish, stop_process
from bench.reliability.effects import CREATE_EFFECTS, EXECUTED_TWICE
from bench.reliability.load import schedules
from kairos.cli.executor import executor_arguments
from kairos.cli.ticker import ticker_arguments
from kairos.devinfra.kafka_cluster import LocalCluster, Security
from kairos.devinfra.kafka_runtime import stop_pids
from kairos.devinfra.postgres import LocalPostgres
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole, create_topics

PARTITIONS = 12
BROKERS = 3
HANDLERS = "bench.reliability.effects:handlers"
REPO = Path(__file__).resolve().parents[2]
SMALL_DISK = "128m"
"""The file system of the second ticker's state: room for its store, small enough to fill."""


def wait_for(probe: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


@dataclass
class Service:
    """A `kairos` service process that can be killed, stopped and started again as it was."""

    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    metrics_port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    control: threading.RLock = field(default_factory=threading.RLock)
    """Held by whoever acts on the process (a scenario killing and restarting it), so that
    the supervisor does not restart it in between."""
    retired: bool = False

    def start(self) -> None:
        if self.alive():
            return
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kairos.cli", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no transaction finished, no goodbye to the group."""
        if self.alive():
            self.send(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, SIGKILL if it does not end within a minute (after SIGCONT, if stopped)."""
        self.retired = True
        if not self.alive():
            return
        assert self.process is not None
        self.send(signal.SIGCONT)
        stop_process(self.process, timeout_s=60)

    def ensure_running(self) -> bool:
        """Start it if it is not running (after SIGCONT, if stopped); True if it was started."""
        if self.alive():
            self.send(signal.SIGCONT)
            return False
        self.start()
        return True


class Supervisor:
    """Restarts a service that exited, `RESTART_S` later: what the systemd units
    (`Restart=always`, `RestartSec=2s`) and a Kubernetes pod do in production. A ticker whose
    transaction call hung exits on purpose (code 75) for this."""

    RESTART_S = 2.0

    def __init__(self, services: Sequence[Service]) -> None:
        self.services = services
        self.restarts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for service in self.services:
                if service.retired or service.alive() or not service.control.acquire(False):
                    continue
                try:
                    self._restart(service)
                finally:
                    service.control.release()

    def _restart(self, service: Service) -> None:
        assert service.process is not None
        code = service.process.returncode
        if self._stop.wait(self.RESTART_S) or service.retired or service.alive():
            return
        service.start()
        self.restarts.append(f"{service.name} exited with code {code}; restarted by the supervisor")


class System:
    """The whole deployment, built in `workdir` on `cluster` (a plaintext one of its own by
    default); `kafka_config` is the librdkafka properties file of a secured cluster's user."""

    def __init__(
        self,
        workdir: Path,
        *,
        seed: int,
        size: int,
        cluster: LocalCluster | None = None,
        kafka_config: Path | None = None,
        small_disk: bool = False,
    ) -> None:
        self.workdir = workdir
        self.seed = seed
        self.size = size
        self._owns_cluster = cluster is None
        self.cluster = cluster or LocalCluster(workdir / "cluster", BROKERS, Security.PLAINTEXT)
        self._wants_small_disk = small_disk
        self.kafka_config = kafka_config
        self.postgres = LocalPostgres()
        self.deployment_dir = workdir
        self.shell_journal = workdir / "shell-journal.txt"
        self._bootstrap, self._properties = "", dict[str, str]()
        self.tickers: list[Service] = []
        self.executors: list[Service] = []
        self.dedupe_url = ""
        self.settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
        self.small_disk: Path | None = None
        self.supervisor: Supervisor | None = None

    # -- building -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the cluster and PostgreSQL (the parts every deployment shares)."""
        status, _ = self.cluster.start()
        properties = self.cluster.client_config()
        properties.pop("bootstrap.servers")
        self._bootstrap, self._properties = status.bootstrap_servers, properties
        self.postgres.start()
        if self._wants_small_disk:
            self.small_disk = self._mount_small_disk(self.workdir / "small-disk")

    def deploy(self, now: datetime, topic_prefix: str) -> float:
        """A fresh deployment: its topics, its dedupe database, the load published, two
        tickers and two executors under a supervisor; returns the seconds the publish took.

        Each scenario gets its own, so that its audit reads only its own history (the audit
        reads whole topics: over a suite's worth of runs it took minutes) and a scenario's
        damage cannot spill into the next."""
        self.settings = KafkaSettings(
            bootstrap_servers=self._bootstrap,
            topic_prefix=topic_prefix,
            schedules_partitions=PARTITIONS,
            properties=self._properties,
        )
        self.deployment_dir = self.workdir / topic_prefix.rstrip(".")
        self.deployment_dir.mkdir(parents=True)
        self.shell_journal = self.deployment_dir / "shell-journal.txt"
        create_topics(self.admin(), self.settings.layout)
        self.dedupe_url = self.postgres.create_database("reliability")
        with psycopg.connect(self.dedupe_url, autocommit=True) as connection:
            connection.execute(CREATE_EFFECTS)
        published = publish(
            self.settings, schedules(self.size, self.seed, now, str(self.shell_journal))
        )
        self.tickers = [self._ticker(name) for name in ("t1", "t2")]
        self.executors = [self._executor(name) for name in ("e1", "e2")]
        for service in self.services:
            service.start()
        self.supervisor = Supervisor(self.services)
        self.supervisor.start()
        return published

    def undeploy(self) -> None:
        """Stop the deployment's services (its topics and database stay, for a later look)."""
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None
        for service in self.services:
            service.stop()
        self.tickers, self.executors = [], []

    def _ticker(self, name: str) -> Service:
        port = free_port()
        arguments = ticker_arguments(self.settings, name, self.state_dir(name), metrics_port=port)
        log = self.deployment_dir / f"{name}.log"
        return Service(name, arguments, log, self.client_env(), port)

    def _executor(self, name: str) -> Service:
        arguments = executor_arguments(
            self.settings,
            name,
            self.state_dir(name),
            dedupe_url=self.dedupe_url,
            handlers=HANDLERS,
            concurrency=8,
        )
        env = {**self.client_env(), "KAIROS_RELIABILITY_EXECUTOR": name}
        return Service(name, arguments, self.deployment_dir / f"{name}.log", env)

    def client_env(self) -> dict[str, str]:
        """How a service process reaches a secured cluster: its user's properties file."""
        return {"KAIROS_KAFKA_CONFIG": str(self.kafka_config)} if self.kafka_config else {}

    def state_dir(self, name: str) -> Path:
        """The second ticker's state lives on the small file system, when there is one."""
        if name == "t2" and self.small_disk is not None:
            return self.small_disk / self.deployment_dir.name / name
        return self.deployment_dir / "state" / name

    @staticmethod
    def _mount_small_disk(path: Path) -> Path | None:
        """A small tmpfs at `path`, which a scenario can fill; None when it cannot be mounted
        (not root, or a container that forbids mounts)."""
        path.mkdir(parents=True, exist_ok=True)
        command = ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(path)]
        if os.geteuid() != 0:
            return None
        mounted = subprocess.run(command, check=False, capture_output=True)
        return path if mounted.returncode == 0 else None

    def wait_until_firing(self, timeout_s: float = 180) -> None:
        """Until the tickers together own every schedules partition."""

        def owned() -> float:
            total = 0.0
            for ticker in self.tickers:
                assert ticker.metrics_port is not None
                try:
                    total += metric(ticker.metrics_port, "kairos_ticker_owned_partitions").get(
                        "", 0
                    )
                except OSError:
                    return 0.0
            return total

        wait_for(lambda: owned() == PARTITIONS, timeout_s, "the tickers to own every partition")

    @property
    def services(self) -> list[Service]:
        return [*self.tickers, *self.executors]

    def stop(self) -> None:
        self.undeploy()
        if self._owns_cluster:
            self.cluster.stop()
        self.postgres.stop()
        if self.small_disk is not None:
            subprocess.run(["umount", str(self.small_disk)], check=False, capture_output=True)

    # -- brokers ------------------------------------------------------------------------------

    def admin(self) -> AdminClient:
        return AdminClient({**self.settings.client_config(), "log_level": 0})

    def broker_pid(self, node_id: int) -> int:
        pid = self.cluster.status().nodes[node_id - 1].pid
        if pid is None:
            raise RuntimeError(f"broker {node_id} is not running")
        return pid

    def running_brokers(self) -> list[int]:
        return [node.node_id for node in self.cluster.status().nodes if node.running]

    def signal_broker(self, node_id: int, signum: signal.Signals) -> None:
        os.kill(self.broker_pid(node_id), signum)

    def stop_broker(self, node_id: int) -> None:
        """A clean shutdown (SIGTERM): the broker hands its leaderships over first."""
        stop_pids([self.broker_pid(node_id)], timeout_s=60)

    def start_brokers(self) -> None:
        """Start every broker that does not run; wait until all answer and replicas catch up."""
        self.cluster.start()
        self.wait_until_replicated()

    def wait_until_replicated(self, timeout_s: float = 180) -> None:
        """Until every partition of the deployment's topics has all its replicas in sync."""
        topics = [self.settings.layout.name(role) for role in TopicRole]

        def in_sync() -> bool:
            try:
                metadata = self.admin().list_topics(timeout=5)
            except Exception:
                return False
            return all(
                len(partition.isrs) == BROKERS
                for topic in topics
                for partition in metadata.topics[topic].partitions.values()
            )

        wait_for(in_sync, timeout_s, "every replica back in sync")

    def leader_of(self, topic: str, partition: int) -> int:
        return int(
            self.admin().list_topics(topic, timeout=10).topics[topic].partitions[partition].leader
        )

    # -- health and results -------------------------------------------------------------------

    def heal(self) -> list[str]:
        """Bring every part back as it was; returns what had to be restarted."""
        restarted = []
        stopped = [n.node_id for n in self.cluster.status().nodes if not n.running]
        if stopped:
            self.start_brokers()
            restarted += [f"broker {n}" for n in stopped]
        for service in self.services:
            if service.ensure_running():
                restarted.append(service.name)
        return restarted

    def executed_twice(self) -> list[tuple[str, int]]:
        with psycopg.connect(self.dedupe_url, autocommit=True) as connection:
            return [(str(r[0]), int(r[1])) for r in connection.execute(EXECUTED_TWICE).fetchall()]

    def shell_jobs_ended_twice(self) -> int:
        """Runs whose shell job ran to its end more than once, by the journal the jobs write.

        A shell job is at least once: an executor that dies after the job ended and before its
        outcome committed leaves the run to be executed again. Reported, not a breach."""
        try:
            lines = self.shell_journal.read_text().splitlines()
        except FileNotFoundError:
            return 0
        ends = Counter(line.split()[1] for line in lines if line.startswith("end "))
        return sum(1 for count in ends.values() if count > 1)

    def exited(self) -> Sequence[Service]:
        return [service for service in self.services if not service.alive()]
