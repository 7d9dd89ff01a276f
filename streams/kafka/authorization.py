"""Turns the broker's authorization refusals into one line naming the ACL a role lacks.

The broker says only which kind of resource refused (topic, group, transactional id); the
client knows which topic it was using, and the role says what it needs there. Together they
name the grant to add, so an operator never has to guess from "Topic authorization failed".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kairos.core.errors import KairosError
from kairos.streams.kafka.acls import DeploymentNames, Grant, Operation, Resource, Role, role_grants
from kairos.streams.kafka.permissions import PermissionCheckError, check_grants
from kairos.streams.kafka.settings import KafkaSettings

logger = logging.getLogger(__name__)

_REFUSED_RESOURCE = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: Resource.TOPIC,
    KafkaError.GROUP_AUTHORIZATION_FAILED: Resource.GROUP,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Resource.TRANSACTIONAL_ID,
}
_AUTHENTICATION_FAILURES = {KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}


class NotAuthorizedError(KairosError):
    """The cluster refused this role an operation; `needed` are the grants that cover it."""

    def __init__(self, role: Role, needed: list[Grant], refused: str) -> None:
        self.role = role
        self.needed = needed
        self.refused = refused
        grants = "; ".join(grant.describe() for grant in needed) or "see the role's ACLs"
        super().__init__(
            f"the {role} is not authorized ({refused}): it needs {grants}. Grant them with "
            f"`kairos acls {role} --principal User:<name> --apply` (docs/operations.md, ACLs)"
        )


class NotAuthenticatedError(KairosError):
    def __init__(self, error: KafkaError) -> None:
        self.code = error.code()
        super().__init__(
            f"the cluster refused the credentials ({error.name()}: {error.str()}): check "
            "sasl.mechanism, sasl.username and sasl.password in the Kafka client settings "
            "(--kafka-config, KAIROS_KAFKA_*)"
        )


def refusal(
    error: KafkaError, role: Role, names: DeploymentNames, topic: str | None = None
) -> NotAuthorizedError | NotAuthenticatedError | None:
    """The clear error for `error` if the cluster refused access; `None` for any other error."""
    if error.code() in _AUTHENTICATION_FAILURES:
        return NotAuthenticatedError(error)
    grants = role_grants(role, names)
    if error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        # An idempotent producer's id is refused when the principal may WRITE no topic at all
        # (KIP-679: no IDEMPOTENT_WRITE needed otherwise): what it lacks are its WRITE grants.
        needed = [
            g for g in grants if g.operation is Operation.WRITE and g.resource is Resource.TOPIC
        ]
    elif (resource := _REFUSED_RESOURCE.get(error.code())) is not None:
        needed = [g for g in grants if g.resource == resource and topic in (None, g.name)]
    else:
        return None
    where = f" on topic {topic}" if topic else ""
    return NotAuthorizedError(role, needed, f"{error.name()}{where}")


def diagnosed(
    error: KafkaError,
    role: Role,
    names: DeploymentNames,
    admin: Callable[[], AdminClient],
    *,
    topic: str | None = None,
    timeout_s: float = 10.0,
) -> NotAuthorizedError | NotAuthenticatedError | None:
    """`refusal`, narrowed to the grants the cluster says the principal lacks, when it can say.

    The broker's refusal names only a kind of resource (a transaction's refused topic is not
    named at all); asking for the principal's authorized operations names the very grant.
    `admin` is called only then: most errors a client meets are no refusal.
    """
    refused = refusal(error, role, names, topic)
    if not isinstance(refused, NotAuthorizedError) or not refused.needed:
        return refused
    try:
        checked = check_grants(admin(), refused.needed, names, timeout_s)
    except (KafkaException, PermissionCheckError) as failure:
        logger.info("the %s's ACLs could not be asked of the cluster: %s", role, failure)
        return refused
    if not checked.missing:
        return refused
    return NotAuthorizedError(role, checked.missing, refused.refused)


def check_role(admin: AdminClient, role: Role, names: DeploymentNames, timeout_s: float) -> None:
    """Refuse to start without the role's topic and group ACLs, naming the missing ones.

    Goes on when the cluster cannot say (unreachable for now: the service's own retries
    handle that); a refusal later still names itself through `diagnosed`.
    """
    try:
        checked = check_grants(admin, role_grants(role, names), names, timeout_s)
    except (KafkaException, PermissionCheckError) as error:
        logger.warning("the %s's ACLs were not checked: %s", role, error)
        return
    if checked.missing:
        raise NotAuthorizedError(role, checked.missing, "its ACLs, asked of the cluster at start")


def kafka_error_of(failure: BaseException | None) -> KafkaError | None:
    """The broker's error behind `failure`: a KafkaException's, or one an error carries."""
    while failure is not None:
        if isinstance(failure, KafkaException) and isinstance(failure.args[0], KafkaError):
            return failure.args[0]
        carried = getattr(failure, "kafka_error", None)
        if isinstance(carried, KafkaError):
            return carried
        failure = failure.__cause__
    return None


class RoleAccess:
    """A service's access to the cluster: its ACLs checked once at start, refusals named."""

    def __init__(self, kafka: KafkaSettings, role: Role, names: DeploymentNames) -> None:
        self._kafka = kafka
        self.role = role
        self.names = names
        self._admin: AdminClient | None = None
        self._checked = False

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._kafka.client_config())
        return self._admin

    def check(self, timeout_s: float = 5.0) -> None:
        """On the first call only: refuse to run without the role's topic and group ACLs.

        Briefly: on a fresh cluster the group coordinator may not answer for a while, and a
        refusal the check could not see is still named when it happens (`raise_if_refused`).
        """
        if not self._checked:
            check_role(self._admin_client(), self.role, self.names, timeout_s)
            self._checked = True

    def raise_if_refused(
        self, failure: BaseException | KafkaError, topic: str | None = None
    ) -> None:
        """Raise the error naming the missing grant when `failure` is the cluster refusing."""
        error = failure if isinstance(failure, KafkaError) else kafka_error_of(failure)
        if error is None:
            return
        found = diagnosed(error, self.role, self.names, self._admin_client, topic=topic)
        if found is not None:
            raise found
