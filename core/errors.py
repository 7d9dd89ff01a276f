"""The root of every error Kairos raises on purpose.

Errors carry structured fields so callers never parse messages; the message says what was wrong
and how to fix it.
"""


class KairosError(Exception):
    """Base class of every error Kairos raises deliberately."""
