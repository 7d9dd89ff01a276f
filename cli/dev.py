"""`kairos dev …`: the embedded local environment for development and tests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kairos.cli.dev_up import up
from kairos.services.local_kafka import DEFAULT_DATA_DIR, LocalKafka, LocalKafkaError

app = typer.Typer(help="Run Kairos locally on its embedded defaults.", no_args_is_help=True)
kafka_app = typer.Typer(
    help="A real single-node Kafka broker on loopback (KRaft, no Docker).", no_args_is_help=True
)
app.add_typer(kafka_app, name="kafka")
app.command("up")(up)

DataDirOption = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="KAIROS_KAFKA_DATA_DIR",
        help="Where the broker keeps its storage, config, pid and logs.",
    ),
]


@kafka_app.command("start")
def kafka_start(
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
    port: Annotated[
        int | None, typer.Option(help="Listener port; a free one when omitted.")
    ] = None,
) -> None:
    """Start the broker (resolving its jars from Maven Central once) and print its address."""
    broker = LocalKafka(data_dir=data_dir, port=port)
    try:
        status, started = broker.start()
    except LocalKafkaError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    if not started:
        typer.echo(f"already running (pid {status.pid}); not starting another", err=True)
    typer.echo(status.bootstrap_servers)


@kafka_app.command("stop")
def kafka_stop(data_dir: DataDirOption = DEFAULT_DATA_DIR) -> None:
    """Stop the broker cleanly."""
    if LocalKafka(data_dir=data_dir).stop():
        typer.echo("stopped")
    else:
        typer.echo("not running")


@kafka_app.command("status")
def kafka_status(data_dir: DataDirOption = DEFAULT_DATA_DIR) -> None:
    """Say whether the broker runs, where, and where its log is; exit 1 when it does not run."""
    status = LocalKafka(data_dir=data_dir).status()
    if not status.running:
        typer.echo(f"not running (data directory {status.data_dir})")
        raise typer.Exit(1)
    typer.echo(f"running at {status.bootstrap_servers} (pid {status.pid}); log {status.log_file}")
