"""The secured three-broker cluster, started once per test session, and how tests reach it.

`secure_cluster` starts `kairos dev kafka`'s cluster: three combined KRaft nodes, SASL_SSL with
SCRAM-SHA-512, ACLs enforced. Fixtures for other tests:

- `cluster_bootstrap`: the bootstrap servers;
- `cluster_client_config(user="admin", **overrides)`: a user's librdkafka config dict;
- `cluster_properties_file(user="admin")`: the path of that user's librdkafka properties file;
- `cluster_create_user(prefix="user")`: a new user without ACLs; returns its name;
- `cluster_admin`: an AdminClient of the super user `admin`.

Pre-made users (no ACLs): ticker, executor, producer, auditor, operator. Environment:
`KAIROS_TEST_CLUSTER_DATA_DIR` uses a cluster already running there (started with
`kairos dev kafka start --brokers 3 --security sasl_ssl --data-dir …`) and leaves it running;
`KAIROS_TEST_CLUSTER_PORT` makes a started cluster use the 9 ports from that one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kairos.devinfra.kafka_cluster import LocalCluster, Security
from kairos.devinfra.kafka_cluster_users import ADMIN_USER
from tests.helpers import unique_name

logger = logging.getLogger(__name__)

CLUSTER_BROKERS = 3


@dataclass(frozen=True)
class SecureCluster:
    cluster: LocalCluster
    bootstrap_servers: str
    start_seconds: float

    def client_config(self, user: str = ADMIN_USER, **overrides: Any) -> dict[str, Any]:
        return {**self.cluster.client_config(user), **overrides}

    def properties_file(self, user: str = ADMIN_USER) -> Path:
        return self.cluster.client_files.path(user)

    def create_user(self, prefix: str = "user") -> str:
        name = unique_name(prefix)
        self.cluster.add_user(name)
        return name


def _reused_cluster(data_dir: Path) -> LocalCluster:
    cluster = LocalCluster.at(data_dir)
    assert cluster is not None and cluster.status().running, (
        f"KAIROS_TEST_CLUSTER_DATA_DIR={data_dir} holds no running cluster; start one with "
        f"`kairos dev kafka start --brokers 3 --security sasl_ssl --data-dir {data_dir}`"
    )
    assert (cluster.brokers, cluster.security) == (CLUSTER_BROKERS, Security.SASL_SSL), (
        f"the cluster in {data_dir} must have 3 brokers and sasl_ssl security"
    )
    return cluster


@pytest.fixture(scope="session")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    reuse = os.environ.get("KAIROS_TEST_CLUSTER_DATA_DIR")
    if reuse:
        cluster = _reused_cluster(Path(reuse))
        yield SecureCluster(cluster, cluster.status().bootstrap_servers, 0.0)
        return
    port = os.environ.get("KAIROS_TEST_CLUSTER_PORT")
    cluster = LocalCluster(
        tmp_path_factory.mktemp("cluster"),
        CLUSTER_BROKERS,
        Security.SASL_SSL,
        port=int(port) if port else None,
    )
    began = time.monotonic()
    status, _ = cluster.start()
    seconds = time.monotonic() - began
    logger.warning("the secured %d-broker cluster started in %.1fs", CLUSTER_BROKERS, seconds)
    try:
        yield SecureCluster(cluster, status.bootstrap_servers, seconds)
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def cluster_bootstrap(secure_cluster: SecureCluster) -> str:
    return secure_cluster.bootstrap_servers


@pytest.fixture(scope="session")
def cluster_client_config(secure_cluster: SecureCluster) -> Callable[..., dict[str, Any]]:
    return secure_cluster.client_config


@pytest.fixture(scope="session")
def cluster_properties_file(secure_cluster: SecureCluster) -> Callable[..., Path]:
    return secure_cluster.properties_file


@pytest.fixture(scope="session")
def cluster_create_user(secure_cluster: SecureCluster) -> Callable[..., str]:
    return secure_cluster.create_user


@pytest.fixture(scope="session")
def cluster_admin(secure_cluster: SecureCluster) -> AdminClient:
    return AdminClient(secure_cluster.client_config())
