"""`kairos console`: the web console and its JSON API, read-only, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from kairos.cli.audit import as_document, audit_window
from kairos.cli.options import LogLevelOption, fail, service_arguments, service_kafka_settings
from kairos.cli.partitions import GroupOption
from kairos.core.errors import KairosError
from kairos.services.console.actions import Users
from kairos.services.console.audits import AuditRunner
from kairos.services.console.server import run_console
from kairos.streams.kafka.settings import KafkaSettings

DEFAULT_LISTEN = "127.0.0.1:8080"

_ListenOption = Annotated[
    str,
    typer.Option(
        envvar="KAIROS_CONSOLE_LISTEN",
        help="host:port to serve on; port 0 takes a free one (logged at start).",
    ),
]
_StateDirOption = Annotated[
    Path,
    typer.Option(
        envvar="KAIROS_STATE_DIR",
        help="Where the console keeps its view of the topics (rebuilt from them if deleted).",
    ),
]
_ViewUrlOption = Annotated[
    str | None,
    typer.Option(
        envvar="KAIROS_CONSOLE_VIEW_URL",
        help="postgresql://user@host:5432/db for the view; default: SQLite in --state-dir.",
        show_default=False,
    ),
]
_UsersFileOption = Annotated[
    Path | None,
    typer.Option(
        envvar="KAIROS_CONSOLE_USERS_FILE",
        help="name:token lines of who may pause, resume, trigger and backfill from the console "
        "(chmod 600); without it the console is read-only.",
        show_default=False,
    ),
]


def listen_address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise fail(f"--listen {text!r}: write host:port, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]"), int(port)


def console(
    context: typer.Context,
    state_dir: _StateDirOption,
    listen: _ListenOption = DEFAULT_LISTEN,
    group_id: GroupOption = None,
    view_url: _ViewUrlOption = None,
    users_file: _UsersFileOption = None,
    log_level: LogLevelOption = "INFO",
) -> None:
    """Serve the web console and JSON API: schedules, runs, partitions, activity and audits."""
    logging.getLogger().setLevel(log_level.upper())
    host, port = listen_address(listen)
    settings = service_kafka_settings(context)
    try:
        users = None if users_file is None else Users.load(users_file)
        run_console(
            settings,
            state_dir,
            host=host,
            port=port,
            audit_runner=_auditor(settings),
            group_id=group_id,
            view_url=view_url,
            users=users,
        )
    except KairosError as error:
        raise fail(str(error)) from error
    except OSError as error:
        raise fail(f"--listen {listen}: {error.strerror}; choose another host:port") from error


def _auditor(settings: KafkaSettings) -> AuditRunner:
    """`kairos audit verify`'s own audit, with its defaults, as the console runs it."""

    def audit(start: datetime, end: datetime, as_of: datetime) -> dict[str, Any]:
        report, warnings = audit_window(settings, start, end, as_of=as_of)
        return as_document(report, warnings)

    return audit


def console_arguments(
    settings: KafkaSettings, state_dir: Path, listen: str, users_file: Path | None = None
) -> list[str]:
    """The `kairos` arguments of a console of this deployment."""
    flags = [("--listen", listen), ("--users-file", users_file)]
    return service_arguments("console", settings, None, state_dir, flags)
