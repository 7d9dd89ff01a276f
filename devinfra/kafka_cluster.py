"""A production-shaped Kafka cluster on loopback: several KRaft nodes, optionally TLS + SCRAM.

Every node is both controller and broker (combined mode) and the controllers form a static
quorum of every node (`controller.quorum.voters`): three JVMs instead of six start in half the
time on a small machine, and a three-voter quorum still loses a node and keeps working, which is
what tests of broker failures need. Each node has three listeners:

- CLIENT: what clients use; PLAINTEXT, or SASL_SSL with SCRAM-SHA-512 when secured;
- INTERNAL: replication between brokers; mutual TLS when secured;
- CONTROLLER: the quorum and the brokers' heartbeats; mutual TLS when secured (KRaft cannot
  use SCRAM there: the credentials live in the metadata the controllers serve).

Secured, the StandardAuthorizer denies whatever no ACL allows; the super users are `admin` and
the nodes' own certificate identity. The data directory holds one folder per node (its config,
storage and logs), the TLS files, the users' client property files and `cluster.json`.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from kairos.devinfra.kafka_cluster_config import (
    NodePorts,
    Security,
    node_meta_properties,
    node_settings,
)
from kairos.devinfra.kafka_cluster_tls import TlsFiles, make_tls_files
from kairos.devinfra.kafka_cluster_users import (
    ADMIN_USER,
    ROLE_USERS,
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    ClientFiles,
    check_user_name,
    new_password,
)
from kairos.devinfra.kafka_runtime import (
    DEFAULT_CACHE_ROOT,
    KAFKA_VERSION,
    KafkaRuntime,
    LocalKafkaError,
    free_port,
    new_cluster_id,
    new_directory_id,
    port_is_free,
    stop_pids,
    write_properties,
)

__all__ = ["ClusterStatus", "LocalCluster", "NodeStatus", "Security"]

logger = logging.getLogger(__name__)

STATE_FILE = "cluster.json"
# Modest, because CI runs a cluster beside the single test broker on two cores. The cluster is
# for correctness tests, not benchmarks: without the optimising JIT compiler (C2) a node's start
# costs half the CPU (measured: 33 s instead of 62 s for three nodes), and its throughput
# matters little.
_NODE_JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
_LISTENERS_PER_NODE = 3


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    pid: int | None
    client_port: int
    log_file: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterStatus:
    """What a caller needs to know about the local cluster."""

    data_dir: Path
    security: Security
    nodes: tuple[NodeStatus, ...]

    @property
    def running(self) -> bool:
        """True when every node runs."""
        return all(node.running for node in self.nodes)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{node.client_port}" for node in self.nodes)


def _pid_runs_config(pid: int, config: Path) -> bool:
    """True when `pid` is the node started on `config` (not a recycled pid or another node)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and str(config).encode() in cmdline


class LocalCluster:
    """`brokers` combined KRaft nodes on loopback, their cached artifacts and their data dir."""

    def __init__(
        self,
        data_dir: Path,
        brokers: int = 3,
        security: Security = Security.PLAINTEXT,
        port: int | None = None,
        cache_root: Path = DEFAULT_CACHE_ROOT,
    ) -> None:
        if brokers < 1:
            raise LocalKafkaError(f"a cluster needs at least one broker, not {brokers}")
        self.data_dir = data_dir
        self.brokers = brokers
        self.security = security
        self.requested_port = port
        self.runtime = KafkaRuntime(cache_root)
        self.tls = TlsFiles(data_dir / "tls")
        self._state_file = data_dir / STATE_FILE

    @classmethod
    def at(cls, data_dir: Path, cache_root: Path = DEFAULT_CACHE_ROOT) -> LocalCluster | None:
        """The cluster a data directory holds, as it was created; None when it holds none."""
        path = data_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
            return cls(data_dir, len(state["ports"]), Security(state["security"]), None, cache_root)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as error:
            raise LocalKafkaError(
                f"{path} is not a local cluster's state ({error!r}); stop any node still "
                "running from that directory and delete it, or pass another --data-dir"
            ) from None

    # -- state -------------------------------------------------------------------------------

    def _read_state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self._state_file.read_text())
        except FileNotFoundError:
            return {}
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        self._state_file.write_text(json.dumps(state, indent=2))

    def _ports(self) -> list[NodePorts]:
        return [NodePorts(*ports) for ports in self._read_state()["ports"]]

    def _config(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}" / "server.properties"

    def _log_dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}" / "logs"

    def status(self) -> ClusterStatus:
        state = self._read_state()
        pids: list[int | None] = state.get("pids") or [None] * len(state.get("ports", []))
        nodes = []
        for index, ports in enumerate(state.get("ports", [])):
            node_id, pid = index + 1, pids[index]
            alive = pid is not None and _pid_runs_config(pid, self._config(node_id))
            log_file = self._log_dir(node_id) / "server.log"
            nodes.append(NodeStatus(node_id, pid if alive else None, ports[0], log_file))
        return ClusterStatus(self.data_dir, self.security, tuple(nodes))

    @property
    def client_files(self) -> ClientFiles:
        """The users' client property files (secured clusters only)."""
        if self.security is not Security.SASL_SSL:
            raise LocalKafkaError(
                f"the cluster in {self.data_dir} is not secured, so it has no users; "
                "start one with --security sasl_ssl in another --data-dir"
            )
        return ClientFiles(self.data_dir, self.status().bootstrap_servers, self.tls.ca_certificate)

    def client_config(self, user: str = ADMIN_USER) -> dict[str, str]:
        """librdkafka settings reaching the cluster as `user` (any user when not secured)."""
        if self.security is Security.PLAINTEXT:
            return {"bootstrap.servers": self.status().bootstrap_servers}
        return self.client_files.config(user)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> tuple[ClusterStatus, bool]:
        """Start every node that does not run (creating the cluster the first time); returns
        (status, whether any node was started now)."""
        self._check_matches_state()
        current = self.status()
        if current.nodes and current.running:
            return current, False
        self.runtime.ensure_artifacts()
        if not self._state_file.exists():
            self._create()
        state = self._read_state()
        pids = state.get("pids") or [None] * self.brokers
        stopped = [node.node_id for node in self.status().nodes if not node.running]
        # Every port first: a node launched before a later one fails would be left unrecorded.
        for node_id in stopped:
            self._check_ports_free(self._ports()[node_id - 1])
        processes: dict[int, subprocess.Popen[bytes]] = {}
        for node_id in stopped:
            process = self.runtime.launch(
                self._config(node_id), self._log_dir(node_id), _NODE_JVM_OPTIONS
            )
            processes[node_id] = process
            pids[node_id - 1] = process.pid
        self._write_state({**state, "pids": pids})
        self._wait_until_ready(processes, timeout_s)
        status = self.status()
        logger.info(
            "local Kafka %s cluster of %d answers at %s (%s)",
            KAFKA_VERSION,
            self.brokers,
            status.bootstrap_servers,
            self.security,
        )
        return status, True

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop every node cleanly (SIGTERM, then SIGKILL after `timeout_s`); True if any ran."""
        pids = [node.pid for node in self.status().nodes if node.pid is not None]
        if not pids:
            return False
        # All at once: stopped one by one, the last nodes would wait for a quorum that is gone.
        stop_pids(pids, timeout_s)
        # Keep the ports (the static voter set names every controller's); forget only the pids.
        state = self._read_state()
        state.pop("pids", None)
        self._write_state(state)
        return True

    def add_user(self, user: str) -> tuple[Path, bool]:
        """Create a SCRAM user (no ACLs); returns its client properties file and whether it
        was created now (False: it existed and is left as it was)."""
        check_user_name(user)
        if not self.status().running:
            raise LocalKafkaError(
                f"the cluster in {self.data_dir} is not running; start it before adding users"
            )
        return self.client_files.add_user(user)

    # -- creation ----------------------------------------------------------------------------

    def _check_matches_state(self) -> None:
        state = self._read_state()
        if not state:
            if (self.data_dir / "broker.json").exists():
                raise LocalKafkaError(
                    f"{self.data_dir} holds a single local broker, not a cluster; "
                    "pass another --data-dir (or stop that broker and delete the directory)"
                )
            return
        held = (len(state["ports"]), Security(state["security"]))
        if held != (self.brokers, self.security):
            raise LocalKafkaError(
                f"{self.data_dir} holds a cluster of {held[0]} broker(s) with security "
                f"{held[1]}, not {self.brokers} with {self.security}; pass another --data-dir "
                "(or stop that cluster and delete the directory)"
            )

    def _create(self) -> None:
        leftovers = sorted(self.data_dir.glob("node-*/log"))
        if leftovers:
            raise LocalKafkaError(
                f"{self.data_dir} holds node storage ({leftovers[0]}) but no {STATE_FILE}: an "
                "interrupted creation; delete the directory and start again"
            )
        ports = self._choose_ports()
        bootstrap = ",".join(f"127.0.0.1:{p.client}" for p in ports)
        format_options: list[str] = []
        secrets: list[str] = []
        if self.security is Security.SASL_SSL:
            make_tls_files(self.tls.directory)
            files = ClientFiles(self.data_dir, bootstrap, self.tls.ca_certificate)
            for user in (ADMIN_USER, *ROLE_USERS):
                password = new_password()
                secrets.append(password)
                files.write(user, password)
                scram = f"name={user},iterations={SCRAM_ITERATIONS},password={password}"
                format_options += ["--add-scram", f"{SCRAM_MECHANISM}=[{scram}]"]
        for node_id in range(1, self.brokers + 1):
            settings = node_settings(
                node_id, ports, self.security, self.tls, self._config(node_id).parent / "log"
            )
            write_properties(self._config(node_id), settings)
        self._format_all(new_cluster_id(), format_options, secrets)
        self._write_state(
            {
                "security": str(self.security),
                "ports": [[p.client, p.internal, p.controller] for p in ports],
            }
        )

    def _choose_ports(self) -> list[NodePorts]:
        count = self.brokers * _LISTENERS_PER_NODE
        if self.requested_port is None:
            chosen: list[int] = []
            while len(chosen) < count:
                port = free_port()
                if port not in chosen:
                    chosen.append(port)
        else:
            chosen = list(range(self.requested_port, self.requested_port + count))
        # Node i's client port is base+i, its internal base+n+i, its controller base+2n+i.
        n = self.brokers
        ports = [NodePorts(chosen[i], chosen[n + i], chosen[2 * n + i]) for i in range(n)]
        for node_ports in ports:
            self._check_ports_free(node_ports)
        return ports

    def _check_ports_free(self, ports: NodePorts) -> None:
        for port in (ports.client, ports.internal, ports.controller):
            if port_is_free(port):
                continue
            if self._state_file.exists():
                hint = (
                    f"a restart needs the ports the cluster was made with ({self._state_file}): "
                    "free it, or delete the data directory to make a new cluster"
                )
            else:
                hint = (
                    f"the cluster needs {self.brokers * _LISTENERS_PER_NODE} consecutive free "
                    "ports from --port; pick another, or omit --port to use free ones"
                )
            raise LocalKafkaError(f"port {port} is already in use; {hint}")

    def _format_all(self, cluster_id: str, options: list[str], secrets: list[str]) -> None:
        """Format node 1's storage with Kafka's tool and give every other node a copy of it.

        The bootstrap metadata (features, SCRAM users) is the same for every node; only
        meta.properties names the node and its directory. Copying saves a JVM start per node:
        each costs 2 s of CPU, and the machine has two cores for everything.
        """
        first = self._config(1).parent / "log"
        result = subprocess.run(
            self.runtime.format_command(self._config(1), cluster_id, *options),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            output = result.stdout + result.stderr
            for secret in secrets:
                output = output.replace(secret, "***")
            raise LocalKafkaError(f"formatting KRaft storage in {first} failed: {output[-2000:]}")
        meta = (first / "meta.properties").read_text()
        for node_id in range(2, self.brokers + 1):
            copy = self._config(node_id).parent / "log"
            shutil.copytree(first, copy)
            (copy / "meta.properties").write_text(
                node_meta_properties(meta, node_id, new_directory_id())
            )

    def _wait_until_ready(
        self, processes: dict[int, subprocess.Popen[bytes]], timeout_s: float
    ) -> None:
        """Until every node answers on its client listener and sees all brokers registered."""
        admin_config = self.client_config(ADMIN_USER)
        ports = self._ports()
        deadline = time.monotonic() + timeout_s
        waiting = list(range(1, self.brokers + 1))
        while waiting:
            for node_id, process in processes.items():
                if process.poll() is not None:
                    self.stop()
                    raise LocalKafkaError(
                        f"node {node_id} exited with code {process.returncode} during start-up; "
                        f"see {self._log_dir(node_id) / 'server.log'} and stdout.log beside it"
                    )
            server = f"127.0.0.1:{ports[waiting[0] - 1].client}"
            if self._sees_every_broker({**admin_config, "bootstrap.servers": server}):
                waiting.pop(0)
                continue
            if time.monotonic() > deadline:
                self.stop()
                raise LocalKafkaError(
                    f"node {waiting[0]} did not answer at {server} with all {self.brokers} "
                    f"brokers within {timeout_s:.0f}s; see "
                    f"{self._log_dir(waiting[0]) / 'server.log'}"
                )
            time.sleep(0.2)

    def _sees_every_broker(self, config: dict[str, str]) -> bool:
        admin = AdminClient({**config, "log_level": 0})
        try:
            metadata = admin.list_topics(timeout=1.0)
        except Exception:
            return False
        return len(metadata.brokers) == self.brokers
