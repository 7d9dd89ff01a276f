"""Options commands share, and the deployment's Kafka settings every command reads from the root
options (`kairos --bootstrap-servers … <command>`, see `kairos.cli.connection`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka.admin import AdminClient
from pydantic import ValidationError

from kairos.cli.connection import (
    Connection,
    ConnectionFlags,
    KafkaSettingsError,
    check_properties,
    probe,
    resolve,
)
from kairos.cli.exit_codes import ExitCode
from kairos.streams.kafka.acls import DeploymentNames, Role
from kairos.streams.kafka.authorization import diagnosed, kafka_error_of
from kairos.streams.kafka.settings import KafkaSettings

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def checked_log_level(value: str) -> str:
    """A level `logging` knows, checked as the option is read: a bad one is a usage error,
    not the ValueError `setLevel` raises before any other check."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        levels = ", ".join(LOG_LEVELS)
        raise typer.BadParameter(f"{value!r} is not a log level; use one of {levels}")
    return level


LogLevelOption = Annotated[
    str,
    typer.Option(
        envvar="KAIROS_LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR.", callback=checked_log_level
    ),
]

_RESOLVED = "kairos.connection"
_PROBED = "kairos.connection.probed"


def connection(context: typer.Context, *, one_shot: bool = True) -> Connection:
    """The deployment's settings, resolved once per invocation.

    A one-shot command (`one_shot`) first asks the cluster for its metadata within `--timeout`,
    so a broker that does not answer is one clear line; a service keeps retrying instead.
    """
    root = context.find_root()
    flags = root.obj if isinstance(root.obj, ConnectionFlags) else ConnectionFlags()
    try:
        if _RESOLVED not in root.meta:
            resolved = resolve(flags)
            check_properties(resolved)
            root.meta[_RESOLVED] = resolved
        current: Connection = root.meta[_RESOLVED]
        if one_shot and not root.meta.get(_PROBED):
            probe(current)
            root.meta[_PROBED] = True
    except KafkaSettingsError as error:
        raise fail(str(error)) from error
    return current


def kafka_settings(context: typer.Context) -> KafkaSettings:
    """A one-shot command's settings, once the broker answered; else it could not run."""
    return connection(context, one_shot=True).settings


def service_kafka_settings(context: typer.Context) -> KafkaSettings:
    """A service's settings, logged once with secrets redacted: its log says where it connects."""
    current = connection(context, one_shot=False)
    logging.getLogger("kairos.cli").info("%s", current.describe())
    return current.settings


def refused(
    settings: KafkaSettings, error: BaseException, role: Role, topic: str | None = None
) -> str | None:
    """The line naming the ACL `role` lacks, when `error` is the cluster refusing it access."""
    kafka_error = kafka_error_of(error)
    if kafka_error is None:
        return None
    found = diagnosed(
        kafka_error,
        role,
        DeploymentNames.of(settings),
        lambda: AdminClient(settings.consumer_config()),
        topic=topic,
    )
    return None if found is None else str(found)


ExecutorStateDirOption = Annotated[
    Path,
    typer.Option(
        "--state-dir",
        envvar="KAIROS_STATE_DIR",
        help="Where the embedded SQLite dedupe store lives (without --dedupe-url).",
    ),
]
DedupeUrlOption = Annotated[
    str | None,
    typer.Option(
        "--dedupe-url",
        envvar="KAIROS_DEDUPE_URL",
        help="postgresql://user@host:5432/db (executors on many hosts) or "
        "sqlite:////path (shared on one host).",
    ),
]


def invalid_settings(invalid: ValidationError) -> typer.Exit:
    """`fail` with a service's settings' problems on one line, each named by its field."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}"
        for error in invalid.errors(include_url=False)
    )
    return fail(problems)


def fail(message: str, code: ExitCode = ExitCode.COULD_NOT_RUN) -> typer.Exit:
    """Print an error the way every command does and return the exit to raise: the command
    could not run, unless `code` says the error is its finding."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def service_arguments(
    command: str,
    settings: KafkaSettings,
    instance: str | None,
    state_dir: Path,
    flags: Iterable[tuple[str, object | None]],
) -> list[str]:
    """`kairos <root options> <command>` arguments of a service of this deployment: its Kafka
    settings (`settings.properties` reach it through its environment, KAIROS_KAFKA_CONFIG or
    KAIROS_KAFKA_* variables), its instance (if it has one) and state, then each flag whose
    value is not `None` (`None`: the flag's default)."""
    arguments = [
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
        "--schedules-partitions",
        str(settings.schedules_partitions),
    ]
    if settings.signing_key is not None:
        arguments += ["--signing-key", str(settings.signing_key)]
    arguments.append(command)
    if instance is not None:
        arguments += ["--instance", instance]
    arguments += ["--state-dir", str(state_dir)]
    for flag, value in flags:
        if value is not None:
            arguments += [flag, str(value)]
    return arguments
