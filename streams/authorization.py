"""Turns the broker's authorization refusals into one line naming the ACL a role lacks.

The broker says only which kind of resource refused (topic, group, transactional id); the
client knows which topic it was using, and the role says what it needs there. Together they
name the grant to add, so an operator never has to guess from "Topic authorization failed".
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from kairos.core.errors import KairosError
from kairos.streams.acls import DeploymentNames, Grant, Resource, Role, role_grants

_REFUSED_RESOURCE = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: Resource.TOPIC,
    KafkaError.GROUP_AUTHORIZATION_FAILED: Resource.GROUP,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Resource.TRANSACTIONAL_ID,
}
_AUTHENTICATION_FAILURES = {KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}


class NotAuthorizedError(KairosError):
    """The cluster refused this role an operation; `needed` are the grants that cover it."""

    def __init__(self, role: Role, error: KafkaError, needed: list[Grant], topic: str | None):
        self.role = role
        self.code = error.code()
        self.needed = needed
        where = f" on topic {topic}" if topic else ""
        grants = "; ".join(grant.describe() for grant in needed) or "see the role's ACLs"
        super().__init__(
            f"the {role} is not authorized ({error.name()}{where}): it needs {grants}. Grant "
            f"them with `kairos acls {role} --principal User:<name> --apply` "
            "(docs/operations.md, ACLs)"
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
    resource = _REFUSED_RESOURCE.get(error.code())
    if resource is None and error.code() != KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        return None
    grants = role_grants(role, names)
    needed = [
        grant
        for grant in grants
        if grant.resource == resource and (topic is None or grant.name == topic)
    ]
    return NotAuthorizedError(role, error, needed, topic)
