"""`kairos dev up`: the whole of Kairos on one machine, in one command.

Starts the local broker (unless one already runs in the same home), creates the topics, starts
a ticker and an executor as child processes, applies the sample schedules, and prints run
events as they arrive. Ctrl-C (or SIGTERM) stops everything it started, and only that.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kairos.cli.console import console_arguments
from kairos.cli.executor import executor_arguments
from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import fail
from kairos.cli.ticker import ticker_arguments
from kairos.core.errors import KairosError
from kairos.core.schedule import load_schedules
from kairos.devinfra.kafka_broker import DEFAULT_DATA_DIR, LocalKafka
from kairos.services.console.settings import DEFAULT_LISTEN, listen_address
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole, create_topics
from kairos.streams.wire.codec import DecodeError, make_codecs

DEFAULT_HOME = DEFAULT_DATA_DIR.parent / "dev"
_CHILD_GRACE_S = 30


def _sample_schedules_text() -> str:
    return resources.files("kairos.cli").joinpath("sample_schedules.yaml").read_text()


class _Child:
    """A Kairos service started as `python -m kairos.cli …`, logging to a file."""

    def __init__(self, name: str, args: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        with log_path.open("ab") as log:
            # Where this run's lines begin: the log is kept across runs.
            self.log_start = log.tell()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kairos.cli", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own process group: the terminal's Ctrl-C reaches only `dev up`, which then
                # stops the child in order (SIGTERM, grace period), instead of all at once.
                start_new_session=True,
            )

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise KairosError(f"the {self.name} exited with code {code}; see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=_CHILD_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _print_event(event: dict[str, Any]) -> None:
    started, finished = event["started_at"], event["finished_at"]
    detail = ""
    if event["kind"] == "started" and started is not None:
        lateness = (started - event["nominal_at"]).total_seconds()
        detail = f" {lateness:.3f}s after its nominal instant"
    elif finished is not None and started is not None:
        detail = f" in {(finished - started).total_seconds():.3f}s"
    if event["reason"]:
        detail += f" ({event['reason']})"
    now = datetime.now(UTC).strftime("%H:%M:%S")
    typer.echo(f"{now}  {event['kind']:<13} {event['run_id']} attempt {event['attempt']}{detail}")


_HomeOption = Annotated[
    Path,
    typer.Option(
        envvar="KAIROS_DEV_HOME",
        help="Where the broker, the ticker and the executor keep their data and logs.",
    ),
]

_SchedulesFileOption = Annotated[
    Path | None,
    typer.Option("--schedules", "-f", help="A schedules file to apply instead of the sample one."),
]

_StopAfterOption = Annotated[
    int | None,
    typer.Option(help="Stop by itself after this many runs succeeded (for scripts)."),
]

_TimeoutSOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="Stop by itself after this many seconds; with --stop-after, exit 1 if fewer "
        "runs succeeded by then.",
    ),
]
_ConsoleListenOption = Annotated[
    str,
    typer.Option(help="host:port of the web console; port 0 takes a free one."),
]
_SERVING = re.compile(r"console serving on (http://\S+)")


def up(
    home: _HomeOption = DEFAULT_HOME,
    schedules_file: _SchedulesFileOption = None,
    stop_after: _StopAfterOption = None,
    timeout_s: _TimeoutSOption = None,
    console_listen: _ConsoleListenOption = DEFAULT_LISTEN,
) -> None:
    """Start a local broker, a ticker, an executor and the console, apply sample schedules,
    show the runs."""
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        text = schedules_file.read_text() if schedules_file else _sample_schedules_text()
        is_json = schedules_file is not None and schedules_file.suffix == ".json"
        schedules = load_schedules(text, "json" if is_json else "yaml")
    except (OSError, KairosError) as error:
        raise fail(f"cannot read the schedules: {error}") from error
    home.mkdir(parents=True, exist_ok=True)
    with ExitStack() as cleanup:
        broker = LocalKafka(data_dir=home / "kafka")
        typer.echo("starting the local Kafka broker (the first start downloads it with Maven)…")
        try:
            status, started = broker.start()
        except KairosError as error:
            raise fail(str(error)) from error
        if started:
            cleanup.callback(broker.stop)
        bootstrap = status.bootstrap_servers
        assert bootstrap is not None
        settings = KafkaSettings(bootstrap_servers=bootstrap)
        create_topics(AdminClient(settings.consumer_config()), settings.layout)
        children = _start_services(settings, home, console_listen)
        for child in reversed(children):
            cleanup.callback(child.stop)
        with SchedulesClient(settings, changed_by="kairos dev up") as client:
            client.upsert_all(schedules, reason="kairos dev up sample")
        address = _console_address(children[-1])
        typer.echo(
            f"console {address} (read-only); "
            f"broker {bootstrap}; ticker and executor running (logs in {home}); "
            f"applied {len(schedules)} schedules. Runs appear below as they fire; Ctrl-C stops."
        )
        _follow_runs(settings, children, stop, stop_after, timeout_s)
    typer.echo("stopped everything dev up started")


def _start_services(settings: KafkaSettings, home: Path, console_listen: str) -> list[_Child]:
    """The ticker, the executor and the console (last), each logging in `home`."""
    return [
        _Child(
            "ticker",
            ticker_arguments(settings, "dev-ticker", home / "ticker"),
            home / "ticker.log",
        ),
        _Child(
            "executor",
            executor_arguments(settings, "dev-executor", home / "executor"),
            home / "executor.log",
        ),
        _Child(
            "console",
            console_arguments(settings, home / "console", _free_or_any(console_listen)),
            home / "console.log",
        ),
    ]


def _free_or_any(listen: str) -> str:
    """`listen`, or any free port when it is the default and taken (another `dev up`, say):
    the console's address is printed either way."""
    if listen != DEFAULT_LISTEN:
        return listen
    host, port = listen_address(listen)
    try:
        with socket.create_server((host, port)):
            return listen
    except OSError:
        return f"{host}:0"


def _console_address(console: _Child, timeout_s: float = 60.0) -> str:
    """The address the console logs once it listens (its port may have been chosen free)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        console.check_alive()
        with console.log_path.open("rb") as log:
            log.seek(console.log_start)
            found = _SERVING.search(log.read().decode(errors="replace"))
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise KairosError(
        f"the console did not start listening in {timeout_s:.0f}s; see {console.log_path}"
    )


def _follow_runs(
    settings: KafkaSettings,
    children: list[_Child],
    stop: threading.Event,
    stop_after: int | None,
    timeout_s: float | None,
) -> None:
    codec = make_codecs().run_event
    consumer = Consumer(
        settings.consumer_config(
            **{
                "group.id": settings.deployment_id(f"dev-up-{time.time_ns()}"),
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
    )
    consumer.subscribe([settings.layout.name(TopicRole.RUN_EVENTS)])
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    succeeded = 0
    try:
        while not stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                if stop_after is None:
                    return
                raise fail(
                    f"{succeeded} of {stop_after} runs succeeded within {timeout_s:g}s",
                    ExitCode.FINDING,
                )
            for child in children:
                child.check_alive()
            message = consumer.poll(0.5)
            if message is None or message.error() is not None or message.value() is None:
                continue
            try:
                event = codec.decode(message.value() or b"")
            except DecodeError:
                continue
            _print_event(event)
            succeeded += event["kind"] == "succeeded"
            if stop_after is not None and succeeded >= stop_after:
                return
    except KairosError as error:
        raise fail(str(error)) from error
    finally:
        consumer.close()
