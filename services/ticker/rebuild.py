"""Abandoning a failed transaction: the ticker then rebuilds its clients from committed state."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

from kairos.core.errors import KairosError
from kairos.services.ticker.transaction import FiringTransactions

logger = logging.getLogger(__name__)


class RebuildError(KairosError):
    """A transaction failed or the producer is fenced: drop everything and rejoin the group."""

    retryable = True


def abandon(transactions: FiringTransactions | None) -> None:
    """Abort the open transaction if the producer still can; the rebuild recovers either way.

    A fresh producer with the same transactional id is the one path that works after every
    failure (librdkafka can hang reusing a producer whose transaction failed mid-way while the
    broker was away): its `init_transactions` bumps the epoch and aborts whatever the old one
    left open. The stores never saw the abandoned work, and the new consumer resumes from the
    committed offsets.
    """
    if transactions is None:
        return
    try:
        transactions.abort()
    except KafkaException as abort_failure:
        logger.warning("abort failed (%s)", abort_failure.args[0].str())
