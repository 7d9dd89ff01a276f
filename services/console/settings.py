"""How one console process runs: one frozen model, filled at the CLI edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from kairos.services.settings_fields import ServiceSettings, Setting

DEFAULT_LISTEN = "127.0.0.1:8080"


def listen_address(text: str) -> tuple[str, int]:
    """`host:port` (a bracketed IPv6 host too) as a host and a port; raises `ValueError`."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r}: write host:port, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]"), int(port)


class ConsoleSettings(ServiceSettings):
    """How one console runs; `kairos console` takes each field as an option."""

    state_dir: Path
    """Where the console keeps its view of the topics (rebuilt from them if deleted)."""
    listen: Annotated[
        tuple[str, int],
        Setting(env="KAIROS_CONSOLE_LISTEN", parse=listen_address, metavar="HOST:PORT"),
    ] = listen_address(DEFAULT_LISTEN)
    """host:port to serve on (default 127.0.0.1:8080); port 0 takes a free one (logged at
    start)."""
    group_id: Annotated[str | None, Setting(env="KAIROS_TICKER_GROUP")] = None
    """Consumer group of the tickers; default: the deployment's, <topic prefix>tickers."""
    view_url: Annotated[str | None, Setting(env="KAIROS_CONSOLE_VIEW_URL")] = None
    """postgresql://user@host:5432/db for the view; default: SQLite in --state-dir."""
    users_file: Annotated[Path | None, Setting(env="KAIROS_CONSOLE_USERS_FILE")] = None
    """name:token lines of who may pause, resume, trigger and backfill from the console (chmod
    600); without it the console is read-only."""
