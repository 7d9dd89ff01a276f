"""Whether a failure is worth trying again: the one place that says so.

Kairos' own errors carry the answer on their class (`KairosError.retryable`). The broker's carry
it in their `KafkaError` flags, which `remedy` reads:

- an authorization or authentication refusal: STOP. Nothing changes until a grant is added or the
  credentials fixed, and retrying would hide that behind a loop of errors;
- `fatal()` (a fenced producer, say): REBUILD. This client can do nothing more; new clients may;
- `txn_requires_abort()`: ABORT. Abort the open transaction, then do its work again;
- anything else: RETRY. `retriable()` says librdkafka knows the call may succeed later, and the
  errors it does not flag (a transport failure, a timeout, all brokers down) are what a broker
  that is away looks like: the loops retry them too, until it comes back.

A Kairos error that carries a refused `KafkaError` (`kafka_error`, or a `KafkaException` as its
cause) is never retryable either, whatever its class says. Anything else, neither a Kairos error
nor a broker's, is a bug: STOP.
"""

from __future__ import annotations

from enum import Enum

from confluent_kafka import KafkaError, KafkaException

from kairos.core.errors import KairosError
from kairos.streams.kafka.authorization import kafka_error_of

REFUSALS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
    }
)
"""The broker's refusals of who the client is or what it may do."""


class Remedy(Enum):
    RETRY = "retry"
    """The same call may succeed later: a broker, a store or a topic was unavailable."""
    ABORT = "abort"
    """Abort the open transaction, then do its work again."""
    REBUILD = "rebuild"
    """The client is unusable: close it, make new clients, then do the work again."""
    STOP = "stop"
    """Trying again cannot help: what was wrong must be fixed first."""


def remedy(error: BaseException) -> Remedy:
    """What a loop should do about `error` (module docstring)."""
    if isinstance(error, KafkaException) and isinstance(error.args[0], KafkaError):
        return _kafka_remedy(error.args[0])
    if isinstance(error, KairosError):
        carried = kafka_error_of(error)
        if carried is not None and carried.code() in REFUSALS:
            return Remedy.STOP
        return Remedy.RETRY if error.retryable else Remedy.STOP
    return Remedy.STOP


def is_retryable(error: BaseException) -> bool:
    """True when the work that failed may be tried again (after an abort or a rebuild)."""
    return remedy(error) is not Remedy.STOP


def _kafka_remedy(error: KafkaError) -> Remedy:
    if error.code() in REFUSALS:
        return Remedy.STOP
    if error.fatal():
        return Remedy.REBUILD
    if error.txn_requires_abort():
        return Remedy.ABORT
    return Remedy.RETRY
