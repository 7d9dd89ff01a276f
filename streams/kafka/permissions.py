"""Which of a role's grants the connected principal lacks, asked of the cluster itself.

The brokers report the operations a principal may perform on each topic and group it can see
(KIP-430's authorized operations), so a process can name the ACL it is missing without the
right to describe ACLs. Prefixed grants (transactional ids, restore groups) are not described
this way; their refusals name themselves (streams/kafka/authorization.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from kairos.streams.kafka.acls import DeploymentNames, Grant, Pattern, Resource
from kairos.streams.kafka.passing import COORDINATOR_MOVING, passes
from kairos.streams.kafka.topics import TopicRole

_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}


class PermissionCheckError(Exception):
    """The cluster did not say what this principal may do; `transient` when asking again may."""

    def __init__(self, problem: str, *, transient: bool = False) -> None:
        super().__init__(problem)
        self.transient = transient


def _transient(error: KafkaError) -> bool:
    # A group coordinator still loading or moving, or an answer not back in time: the ACLs may
    # be fine, the question is asked again.
    return passes(error, COORDINATOR_MOVING | {KafkaError._TIMED_OUT})


@dataclass(frozen=True)
class GrantCheck:
    missing: list[Grant]
    unchecked: list[Grant]
    """Prefixed grants no name of the deployment stands for (the restore groups, the
    transactional ids): their refusals name themselves when they happen."""


def check_grants(
    admin: AdminClient, grants: Iterable[Grant], names: DeploymentNames, timeout_s: float
) -> GrantCheck:
    """`_ask_grants`, asked again while the cluster's answer is only not there yet."""
    deadline = time.monotonic() + timeout_s
    wanted = list(grants)
    while True:
        try:
            return _ask_grants(admin, wanted, names, timeout_s)
        except PermissionCheckError as error:
            if not error.transient or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _ask_grants(
    admin: AdminClient, grants: Iterable[Grant], names: DeploymentNames, timeout_s: float
) -> GrantCheck:
    """Which of `grants` the principal `admin` connects as does not hold.

    A prefixed grant is checked on the deployment's topics and groups under its prefix. A topic
    that does not exist is not reported: `kairos topics check` says that.
    """
    wanted = list(grants)
    stands_for = {grant: _names_under(grant, names) for grant in wanted}
    topics = sorted({n for g, ns in stands_for.items() if g.resource is Resource.TOPIC for n in ns})
    groups = sorted({n for g, ns in stands_for.items() if g.resource is Resource.GROUP for n in ns})
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
    missing = [
        grant
        for grant in wanted
        if any(
            (ops := allowed.get((grant.resource, name))) is not None
            and grant.operation.value not in ops
            for name in stands_for[grant]
        )
    ]
    return GrantCheck(missing, [grant for grant in wanted if not stands_for[grant]])


def _names_under(grant: Grant, names: DeploymentNames) -> list[str]:
    """The deployment's topics or groups a grant covers, as far as they are known here."""
    if grant.resource is Resource.TOPIC:
        known = [names.layout.name(role) for role in TopicRole]
    elif grant.resource is Resource.GROUP:
        known = [
            names.ticker_group,
            names.executor_group,
            names.schedule_readers_group,
            names.history_readers_group,
            names.calendar_readers_group,
        ]
    else:
        return []
    if grant.pattern is Pattern.LITERAL:
        return [grant.name]
    return [name for name in known if name.startswith(grant.name)]


def _operations(future: Future[Any], timeout_s: float) -> set[str] | None:
    """The operations allowed on one resource; empty when refused, `None` when it is absent."""
    try:
        description = future.result(timeout=timeout_s)
    except TimeoutError as late:
        raise PermissionCheckError(f"no answer within {timeout_s:g}s", transient=True) from late
    except KafkaException as failure:
        error: KafkaError = failure.args[0]
        if error.code() in _DENIED:
            return set()
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise PermissionCheckError(
            f"{error.name()}: {error.str()}", transient=_transient(error)
        ) from failure
    operations = description.authorized_operations
    if operations is None:
        raise PermissionCheckError(
            "the cluster reports no authorized operations (no authorizer configured?)"
        )
    return {operation.name for operation in operations}
