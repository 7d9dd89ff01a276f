"""`kairos topics create|describe`."""

from __future__ import annotations

import json

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kairos.cli.options import (
    JsonOption,
    fail,
    kafka_settings,
)
from kairos.streams.topics import TopicAdminError, create_topics, describe_topics

app = typer.Typer(help="Create and inspect the topics Kairos uses.", no_args_is_help=True)


@app.command("create")
def create(context: typer.Context) -> None:
    """Create every declared topic that does not exist yet (safe to run again)."""
    settings = kafka_settings(context)
    admin = AdminClient(settings.consumer_config())
    try:
        created = create_topics(admin, settings.layout)
    except (TopicAdminError, KafkaException) as error:
        raise fail(f"could not create topics at {settings.bootstrap_servers}: {error}") from error
    for name in created:
        typer.echo(f"created {name}")
    if not created:
        typer.echo("all topics exist")


@app.command("describe")
def describe(
    context: typer.Context,
    as_json: JsonOption = False,
) -> None:
    """Show each declared topic and flag drift from its declaration; exit 1 on any drift."""
    settings = kafka_settings(context)
    admin = AdminClient(settings.consumer_config())
    try:
        states = describe_topics(admin, settings.layout)
    except KafkaException as error:
        raise fail(f"could not describe topics at {settings.bootstrap_servers}: {error}") from error
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "name": s.spec.name,
                        "exists": s.exists,
                        "partitions": s.partitions,
                        "config": s.spec.config,
                        "drift": s.drift,
                    }
                    for s in states
                ],
                indent=2,
            )
        )
    else:
        for state in states:
            mark = "ok" if not state.drift else "DRIFT"
            typer.echo(f"{mark:5} {state.spec.name} partitions={state.partitions}")
            for line in state.drift:
                typer.echo(f"      {line}")
    if any(state.drift for state in states):
        raise typer.Exit(1)
