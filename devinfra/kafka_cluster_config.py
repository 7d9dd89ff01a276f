"""The configuration of each node of the local cluster (`kafka_cluster.py`): its listeners,
the static quorum, production-shaped replication and, when secured, TLS, SCRAM and the
authorizer. The module docstring of `kafka_cluster.py` explains the choices."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from kairos.devinfra.kafka_cluster_tls import BROKER_PRINCIPAL, TlsFiles
from kairos.devinfra.kafka_cluster_users import ADMIN_USER, SCRAM_MECHANISM
from kairos.devinfra.kafka_runtime import LOCAL_BROKER_SETTINGS


class Security(StrEnum):
    PLAINTEXT = "plaintext"
    SASL_SSL = "sasl_ssl"


@dataclass(frozen=True)
class NodePorts:
    client: int
    internal: int
    controller: int


def node_settings(
    node_id: int, ports: list[NodePorts], security: Security, tls: TlsFiles, log_dirs: Path
) -> dict[str, str]:
    """`server.properties` of node `node_id` (1-based) of the cluster whose nodes use `ports`."""
    own = ports[node_id - 1]
    brokers = len(ports)
    secured = security is Security.SASL_SSL
    client, internal = ("SASL_SSL", "SSL") if secured else ("PLAINTEXT", "PLAINTEXT")
    replicas, min_isr = str(min(3, brokers)), str(min(2, brokers))
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "listeners": f"CLIENT://127.0.0.1:{own.client},INTERNAL://127.0.0.1:{own.internal},"
        f"CONTROLLER://127.0.0.1:{own.controller}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{own.client},"
        f"INTERNAL://127.0.0.1:{own.internal}",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"CLIENT:{client},INTERNAL:{internal},"
        f"CONTROLLER:{internal}",
        "controller.quorum.voters": ",".join(
            f"{index + 1}@127.0.0.1:{p.controller}" for index, p in enumerate(ports)
        ),
        "log.dirs": str(log_dirs),
        # As production: three replicas, two in sync for an acks=all write to succeed.
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        **LOCAL_BROKER_SETTINGS,
    }
    if secured:
        settings.update(_security_settings(tls))
    return settings


def _security_settings(tls: TlsFiles) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.node_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_certificate),
        # Nodes prove who they are to each other; clients prove it with SCRAM instead.
        "ssl.client.auth": "required",
        "listener.name.client.ssl.client.auth": "none",
        "listener.name.client.sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "listener.name.client.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN_USER};{BROKER_PRINCIPAL}",
    }


def node_meta_properties(meta: str, node_id: int, directory_id: str) -> str:
    """Another node's meta.properties: node 1's with its own node and directory ids."""
    own = {"node.id": str(node_id), "directory.id": directory_id}
    lines = []
    for line in meta.splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={own[key]}" if key in own else line)
    return "\n".join(lines) + "\n"
