"""Which of a role's grants the connected principal lacks, asked of the cluster itself.

The brokers report the operations a principal may perform on each topic and group it can see
(KIP-430's authorized operations), so a process can name the ACL it is missing without the
right to describe ACLs. Prefixed grants (transactional ids, restore groups) are not described
this way; their refusals name themselves (streams/authorization.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from kairos.streams.acls import Grant, Pattern, Resource

_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}


class PermissionCheckError(Exception):
    """The cluster did not say what this principal may do (unreachable, or it has no authorizer)."""


def missing_grants(admin: AdminClient, grants: Iterable[Grant], timeout_s: float) -> list[Grant]:
    """The literal topic and group grants the principal `admin` connects as does not hold.

    A topic that does not exist is not reported: `kairos topics check` says that.
    """
    checked = [grant for grant in grants if grant.pattern is Pattern.LITERAL]
    topics = sorted({g.name for g in checked if g.resource is Resource.TOPIC})
    groups = sorted({g.name for g in checked if g.resource is Resource.GROUP})
    allowed: dict[tuple[Resource, str], set[str] | None] = {}
    if topics:
        answers = admin.describe_topics(
            TopicCollection(topics), include_authorized_operations=True, request_timeout=timeout_s
        )
        for name, future in answers.items():
            allowed[Resource.TOPIC, name] = _operations(future, timeout_s)
    if groups:
        answers = admin.describe_consumer_groups(
            groups, include_authorized_operations=True, request_timeout=timeout_s
        )
        for name, future in answers.items():
            allowed[Resource.GROUP, name] = _operations(future, timeout_s)
    return [
        grant
        for grant in checked
        if (ops := allowed.get((grant.resource, grant.name))) is not None
        and grant.operation.value not in ops
    ]


def _operations(future: Future[Any], timeout_s: float) -> set[str] | None:
    """The operations allowed on one resource; empty when refused, `None` when it is absent."""
    try:
        description = future.result(timeout=timeout_s)
    except KafkaException as failure:
        error: KafkaError = failure.args[0]
        if error.code() in _DENIED:
            return set()
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise PermissionCheckError(error.str()) from failure
    operations = description.authorized_operations
    if operations is None:
        raise PermissionCheckError(
            "the cluster reports no authorized operations (no authorizer configured?)"
        )
    return {operation.name for operation in operations}
