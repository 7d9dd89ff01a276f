"""The root of every error Kairos raises on purpose.

Errors carry structured fields so callers never parse messages; the message says what was wrong
and how to fix it.

Whether trying again can help is data on the class, `retryable` (as Temporal's SDK marks its
`ApplicationError(non_retryable=...)`): a loop deciding between "retry" and "stop" asks
`kairos.streams.kafka.failures.is_retryable`, never a list of classes of its own.
"""

from typing import ClassVar


class KairosError(Exception):
    """Base class of every error Kairos raises deliberately."""

    retryable: ClassVar[bool] = False
    """True when the same operation may succeed later without anyone changing anything: a broker,
    a store or a topic was unavailable. False (the default) when what was wrong must be fixed
    first: bad input, a refused grant, a misconfiguration."""
