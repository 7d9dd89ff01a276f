"""Every `kairos` command that cannot run exits 2 with one `error:` line and no traceback.

The table holds one could-not-run condition per command and subcommand: no broker (a closed
loopback port, a short `--timeout`), an unreadable file, a bad argument, an unusable state or data
directory. The commands are read from the typer app, so a command added without a row fails
`test_every_command_has_a_row`. Each row runs `kairos` as its own process, as a script would,
several at once; the service rows (`ticker`, `executor`, `console`, `dev up`) get a condition
that stops them at start, so nothing waits for a broker. The codes: docs/operations.md#exit-codes.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from kairos.cli.app import app
from kairos.cli.exit_codes import ExitCode

NO_BROKER = ("--bootstrap-servers", "127.0.0.1:1", "--timeout", "0.5")
"""Nothing listens on loopback port 1 (only root could bind it): refused at once, every time."""
QUIET = ("--log-level", "WARNING")
"""A service logs where it connects at INFO; at WARNING its error is the only line."""
RUN_TIMEOUT_S = 60
"""A process still running after this long hangs: the row fails instead of the whole run."""


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield " ".join(path)
        return
    for name, subcommand in subcommands.items():
        yield from _commands(subcommand, (*path, name))


COMMANDS = sorted(_commands(get_command(app)))


@dataclass(frozen=True)
class Inputs:
    """The files and directories the conditions name, made in one temporary directory."""

    schedules: str
    """A valid schedules file: the command gets as far as the broker."""
    calendars: str
    missing: str
    blocked: str
    """A path under a regular file: no directory can be made there."""
    broken_kafka: str
    """A data directory whose local-cluster state is not JSON."""
    no_store: str
    """A state directory without the executors' dedupe store."""

    @classmethod
    def made_in(cls, root: Path) -> Inputs:
        schedules = root / "schedules.yaml"
        schedules.write_text(
            "schedules:\n  - id: exit.codes\n    cron: '0 * * * *'\n    job: {kind: noop}\n"
        )
        calendars = root / "calendars.yaml"
        calendars.write_text(
            "calendars:\n  - id: exit-codes\n    owner: ops\n    timezone: UTC\n"
            "    holidays: [{date: 2027-12-25, name: Christmas Day}]\n"
        )
        (root / "a-file").write_text("not a directory\n")
        broken_kafka = root / "kafka"
        broken_kafka.mkdir()
        (broken_kafka / "cluster.json").write_text("{not json")
        (root / "no-store").mkdir()
        return cls(
            str(schedules),
            str(calendars),
            str(root / "missing.yaml"),
            str(root / "a-file" / "state"),
            str(broken_kafka),
            str(root / "no-store"),
        )


def could_not_run(inputs: Inputs) -> dict[str, tuple[str, ...]]:
    """Each command's arguments, root options first, in a condition where it cannot run."""
    public_key = base64.b64encode(bytes(32)).decode()
    at_start = ("--instance", "exit-codes", "--state-dir", inputs.blocked, *QUIET)
    kafka = ("--data-dir", inputs.broken_kafka)
    store = ("--state-dir", inputs.no_store)
    return {
        "acls": (*NO_BROKER, "acls", "ticker"),
        "apply": (*NO_BROKER, "apply", "-f", inputs.schedules),
        "audit verify": (*NO_BROKER, "audit", "verify", "--from", "-1h", "--to", "now"),
        "calendars apply": (*NO_BROKER, "calendars", "apply", "-f", inputs.calendars),
        "calendars delete": (*NO_BROKER, "calendars", "delete", "exit-codes"),
        "calendars list": (*NO_BROKER, "calendars", "list"),
        "calendars seed": ("calendars", "seed", "--id", "x", "--owner", "o", "--years", "20x6"),
        "calendars show": (*NO_BROKER, "calendars", "show", "exit-codes"),
        "concurrency list": ("concurrency", "list", *store),
        "concurrency remove": ("concurrency", "remove", "owner:ops", *store),
        "concurrency set": ("concurrency", "set", "owner:ops", "2", *store),
        "console": (*NO_BROKER, "console", "--state-dir", inputs.blocked, *QUIET),
        "dev kafka add-user": ("dev", "kafka", "add-user", "billing", *kafka),
        "dev kafka start": ("dev", "kafka", "start", *kafka),
        "dev kafka status": ("dev", "kafka", "status", *kafka),
        "dev kafka stop": ("dev", "kafka", "stop", *kafka),
        "dev up": ("dev", "up", "--home", inputs.blocked, "--schedules", inputs.missing),
        "executor": (*NO_BROKER, "executor", *at_start),
        "notifier": (
            *NO_BROKER,
            *("notifier", "--instance", "exit-codes", "--routes-file", inputs.missing, *QUIET),
        ),
        "partitions": (*NO_BROKER, "partitions"),
        "preview": ("preview", "-f", inputs.missing),
        "replay": (*NO_BROKER, "replay"),
        "runs get": (*NO_BROKER, "runs", "get", "exit.codes@2027-03-14T07:00:00Z"),
        "runs late": (*NO_BROKER, "runs", "late"),
        "runs list": (*NO_BROKER, "runs", "list"),
        "schedules backfill": (
            *NO_BROKER,
            *("schedules", "backfill", "exit.codes", "--from", "-2h", "--to", "-1h"),
        ),
        "schedules delete": (*NO_BROKER, "schedules", "delete", "exit.codes"),
        "schedules describe": (*NO_BROKER, "schedules", "describe", "exit.codes"),
        "schedules get": (*NO_BROKER, "schedules", "get", "exit.codes"),
        "schedules list": (*NO_BROKER, "schedules", "list"),
        "schedules pause": (*NO_BROKER, "schedules", "pause", "exit.codes"),
        "schedules resume": (*NO_BROKER, "schedules", "resume", "exit.codes"),
        "schedules trigger": (*NO_BROKER, "schedules", "trigger", "exit.codes"),
        "teams keygen": ("teams", "keygen", "ops", "--out", f"{inputs.blocked}/key"),
        "teams list": (*NO_BROKER, "teams", "list"),
        "teams put": (*NO_BROKER, "teams", "put", "ops", "--public-key", public_key),
        "teams quota": (*NO_BROKER, "teams", "quota", "ops"),
        "teams rejections": (*NO_BROKER, "teams", "rejections", "ops"),
        "teams remove": (*NO_BROKER, "teams", "remove", "ops"),
        "teams set-quota": (*NO_BROKER, "teams", "set-quota", "ops", "--max-schedules", "5"),
        "ticker": (*NO_BROKER, "ticker", *at_start),
        "topics check": (*NO_BROKER, "topics", "check"),
        "topics create": (*NO_BROKER, "topics", "create"),
        "topics describe": (*NO_BROKER, "topics", "describe"),
    }


def _kairos(arguments: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    # The conditions are the arguments alone: no KAIROS_* setting of the caller's may change them.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    return subprocess.run(
        [sys.executable, "-m", "kairos.cli", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    table = could_not_run(Inputs.made_in(tmp_path_factory.mktemp("exit-codes")))
    # Mostly start-up (imports) and a half-second wait for a broker: a few at once keep the
    # table to seconds on two cores.
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(table, pool.map(_kairos, table.values()), strict=True))


def test_every_command_has_a_row(tmp_path: Path) -> None:
    table = could_not_run(Inputs.made_in(tmp_path))
    assert sorted(table) == COMMANDS, (
        f"without a row: {sorted(set(COMMANDS) - set(table))}; "
        f"rows of no command: {sorted(set(table) - set(COMMANDS))}"
    )


def test_an_error_no_command_words_is_one_line_and_could_not_run(tmp_path: Path) -> None:
    # Reading a local cluster's state under a regular file raises NotADirectoryError, which
    # `kairos dev kafka` does not catch: `main` words it instead of Python's traceback.
    (tmp_path / "a-file").write_text("not a directory\n")
    done = _kairos(("dev", "kafka", "status", "--data-dir", str(tmp_path / "a-file" / "kafka")))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == ExitCode.COULD_NOT_RUN, (done.returncode, done.stderr)
    assert done.stderr.splitlines() == [
        f"error: [Errno 20] Not a directory: '{tmp_path}/a-file/kafka/cluster.json'"
    ]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_that_cannot_run_exits_2_with_one_error_line(
    outcomes: dict[str, subprocess.CompletedProcess[str]], command: str
) -> None:
    done = outcomes[command]
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == ExitCode.COULD_NOT_RUN, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
