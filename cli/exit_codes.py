"""The exit codes of every `kairos` command: the one place they are defined.

A script reads them the same way whatever the command (docs/operations.md, "Exit codes"): 0 the
command did what it was asked and what it checks holds; 1 it ran and found what it exists to
report; 2 it could not run, so nothing was decided. Three codes, no more: a fourth would make
every script learn one command. Usage errors caught by the option parser exit 2 as well (typer's
own code). The ticker's watchdog keeps its supervisor code, 75
(`kairos.services.ticker.watchdog.EXIT_STUCK`).
"""

from __future__ import annotations

from enum import IntEnum

from confluent_kafka import KafkaError, KafkaException

from kairos.core.errors import KairosError


class ExitCode(IntEnum):
    DONE = 0
    """Done: nothing wrong was found, nothing is left to change."""
    FINDING = 1
    """A finding the command exists to report: a breach, drift, an unowned partition, topics
    unlike their declaration, missing ACLs (`acls --check`), a broker that is not running (`dev
    kafka status`)."""
    COULD_NOT_RUN = 2
    """Could not run: bad arguments, an unreadable or invalid input file, an unknown id, no
    broker, a refused grant, an unusable state directory; or `audit verify` inconclusive (no
    breach seen, but an open transaction holds records that decide it). Nothing was decided."""


COULD_NOT_RUN_ERRORS = (KairosError, KafkaException, OSError)
"""What may escape a command that did not say more: each means the command could not run
(`OSError` includes `TimeoutError`). Anything else escaping is a bug, and keeps its traceback."""


def error_line(error: BaseException) -> str:
    """`error` as one line: librdkafka's own text for a Kafka error, never a repr."""
    cause = error.args[0] if isinstance(error, KafkaException) and error.args else None
    text = cause.str() if isinstance(cause, KafkaError) else str(error)
    return "; ".join(line.strip() for line in text.splitlines() if line.strip()) or repr(error)
