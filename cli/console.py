"""`kairos console`: the web console and its JSON API, until SIGTERM or Ctrl-C: read-only unless it
knows its users (a users file or a trusted sign-on proxy)."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from kairos.cli.audit import as_document, audit_window
from kairos.cli.options import (
    LogLevelOption,
    fail,
    invalid_settings,
    service_arguments,
    service_kafka_settings,
)
from kairos.cli.settings_options import with_settings
from kairos.core.errors import KairosError
from kairos.services.console.audits import AuditRunner
from kairos.services.console.identity import Users
from kairos.services.console.server import run_console
from kairos.services.console.settings import ConsoleSettings
from kairos.streams.kafka.settings import KafkaSettings


@with_settings(ConsoleSettings)
def console(context: typer.Context, log_level: LogLevelOption = "INFO", **settings: Any) -> None:
    """Serve the web console and JSON API: schedules, runs, partitions, activity and audits."""
    logging.getLogger().setLevel(log_level.upper())
    kafka = service_kafka_settings(context)
    if kafka.signing_key is not None:
        raise fail(
            "kairos console signs each action as the team acting, with a key of that team from "
            "--team-keys DIR (<team>.key); drop --signing-key"
        )
    try:
        console_settings = ConsoleSettings(**settings)
        users_file = console_settings.users_file
        users = None if users_file is None else Users.load(users_file)
        run_console(kafka, console_settings, _auditor(kafka), users)
    except ValidationError as invalid:
        raise invalid_settings(invalid) from invalid
    except KairosError as error:
        raise fail(str(error)) from error
    except OSError as error:
        host, port = settings["listen"]
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise fail(f"--listen {listen}: {error.strerror}; choose another host:port") from error


def _auditor(settings: KafkaSettings) -> AuditRunner:
    """`kairos audit verify`'s own audit, with its defaults, as the console runs it."""

    def audit(start: datetime, end: datetime, as_of: datetime) -> dict[str, Any]:
        report, warnings = audit_window(settings, start, end, as_of=as_of)
        return as_document(report, warnings)

    return audit


def console_arguments(
    settings: KafkaSettings,
    state_dir: Path,
    listen: str,
    users_file: Path | None = None,
    *more: tuple[str, str | Path | None],
) -> list[str]:
    """The `kairos` arguments of a console of this deployment (`more`: other flags, values)."""
    flags = [("--listen", listen), ("--users-file", users_file), *more]
    return service_arguments("console", settings, None, state_dir, flags)
