"""The SCRAM users of the local secured cluster and their librdkafka client property files.

Each user's password is generated here and written only to its `client-<user>.properties` file
(mode 0600) in the cluster's data directory: never logged, never printed. A file is complete for
librdkafka: bootstrap servers, SASL_SSL, SCRAM-SHA-512, the user and the CA to trust.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kairos.devinfra.kafka_runtime import LocalKafkaError, write_properties

ADMIN_USER = "admin"
# One user per Kairos role (docs/operations.md lists the ACLs each needs); none has an ACL yet.
ROLE_USERS = ("ticker", "executor", "producer", "auditor", "operator")
SCRAM_MECHANISM = "SCRAM-SHA-512"
# Kafka's default for SCRAM-SHA-512 (and its minimum, 4096, doubled), as `--add-scram` uses.
SCRAM_ITERATIONS = 8192
_USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_user_name(name: str) -> str:
    """A user name safe as a SCRAM principal and as part of a file name, or a clear error."""
    if not _USER_NAME.fullmatch(name):
        raise LocalKafkaError(
            f"user name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def new_password() -> str:
    # URL-safe characters only: no ',', ']' or '=' to break `--add-scram`'s bracket syntax.
    return secrets.token_urlsafe(24)


class ClientFiles:
    """The client property files of one cluster's users, in its data directory."""

    def __init__(self, data_dir: Path, bootstrap_servers: str, ca_certificate: Path) -> None:
        self.data_dir = data_dir
        self.bootstrap_servers = bootstrap_servers
        self.ca_certificate = ca_certificate

    def path(self, user: str) -> Path:
        return self.data_dir / f"client-{check_user_name(user)}.properties"

    def users(self) -> list[str]:
        prefix, suffix = "client-", ".properties"
        return sorted(p.name[len(prefix) : -len(suffix)] for p in self.data_dir.glob("client-*"))

    def write(self, user: str, password: str) -> Path:
        path = self.path(user)
        write_properties(
            path,
            {
                "bootstrap.servers": self.bootstrap_servers,
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": user,
                "sasl.password": password,
                "ssl.ca.location": str(self.ca_certificate),
            },
            mode=0o600,
        )
        return path

    def config(self, user: str) -> dict[str, str]:
        """The user's librdkafka configuration, read back from its properties file."""
        path = self.path(user)
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            raise LocalKafkaError(
                f"the cluster in {self.data_dir} has no user {user!r} (no {path.name}); "
                f"add one with `kairos dev kafka add-user {user} --data-dir {self.data_dir}`"
            ) from None
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def add_user(self, user: str, timeout_s: float = 30.0) -> tuple[Path, bool]:
        """Create `user` with a new password through the admin user; wait until every broker
        accepts it (credentials reach each broker through the metadata log, not at once).
        Returns its properties file and False when the user existed already (left unchanged)."""
        path = self.path(user)
        if path.exists():
            return path, False
        password = new_password()
        admin = AdminClient({**self.config(ADMIN_USER), "log_level": 0})
        upsert = UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            password.encode(),
        )
        try:
            admin.alter_user_scram_credentials([upsert])[user].result(timeout=timeout_s)
        except KafkaException as error:
            raise LocalKafkaError(f"the cluster refused to create user {user!r}: {error}") from None
        # Written only once the cluster has the user, so a file always names a real user.
        self.write(user, password)
        self.wait_until_every_broker_accepts(user, timeout_s)
        return path, True

    def wait_until_every_broker_accepts(self, user: str, timeout_s: float) -> None:
        config = self.config(user)
        deadline = time.monotonic() + timeout_s
        for server in self.bootstrap_servers.split(","):
            # Only this broker: a bootstrap list would let another one answer.
            client = AdminClient({**config, "bootstrap.servers": server, "log_level": 0})
            while True:
                try:
                    client.list_topics(timeout=2.0)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise LocalKafkaError(
                            f"broker {server} did not accept the new user {user!r} within "
                            f"{timeout_s:.0f}s; see its server.log"
                        ) from None
                    time.sleep(0.2)
