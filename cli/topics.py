"""`kairos topics create|describe|check`."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import JsonOption, fail, kafka_settings
from kairos.streams.kafka.topic_check import check_topics
from kairos.streams.kafka.topics import (
    ReplicationError,
    TopicAdminError,
    TopicLayout,
    create_topics,
    describe_topics,
    read_cluster,
    resolve_replication,
)

app = typer.Typer(help="Create and inspect the topics Kairos uses.", no_args_is_help=True)

ReplicationFactorOption = Annotated[
    int | None,
    typer.Option(
        "--replication-factor",
        envvar="KAIROS_REPLICATION_FACTOR",
        min=1,
        help="Replicas of every topic. Default: 3, or the broker count on a smaller cluster.",
        show_default=False,
    ),
]
MinInsyncReplicasOption = Annotated[
    int | None,
    typer.Option(
        "--min-insync-replicas",
        envvar="KAIROS_MIN_INSYNC_REPLICAS",
        min=1,
        help="Replicas that must acknowledge each write (acks=all). Default: 2 with 3 or more "
        "replicas, else 1.",
        show_default=False,
    ),
]


def _layout(
    base: TopicLayout, replication_factor: int | None, min_insync_replicas: int | None
) -> TopicLayout:
    return dataclasses.replace(
        base, replication_factor=replication_factor, min_insync_replicas=min_insync_replicas
    )


def _warn(warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


@app.command("create")
def create(
    context: typer.Context,
    replication_factor: ReplicationFactorOption = None,
    min_insync_replicas: MinInsyncReplicasOption = None,
) -> None:
    """Create every declared topic that does not exist yet (safe to run again)."""
    settings = kafka_settings(context)
    admin = AdminClient(settings.consumer_config())
    layout = _layout(settings.layout, replication_factor, min_insync_replicas)
    try:
        creation = create_topics(admin, layout)
    except ReplicationError as error:
        raise fail(str(error)) from error
    except (TopicAdminError, KafkaException) as error:
        raise fail(f"could not create topics at {settings.bootstrap_servers}: {error}") from error
    _warn(creation.replication.warnings)
    replication = creation.replication
    for name in creation.created:
        typer.echo(
            f"created {name} (replication factor {replication.factor}, "
            f"min.insync.replicas {replication.min_insync_replicas})"
        )
    if not creation.created:
        typer.echo("all topics exist (`kairos topics check` says whether they are healthy)")


@app.command("check")
def check(
    context: typer.Context,
    replication_factor: ReplicationFactorOption = None,
    min_insync_replicas: MinInsyncReplicasOption = None,
    as_json: JsonOption = False,
) -> None:
    """Say what is wrong with the deployment's topics and how to fix it: exit 0 when healthy,
    1 with one line per problem, 2 when the check could not run."""
    settings = kafka_settings(context)
    admin = AdminClient(settings.consumer_config())
    layout = _layout(settings.layout, replication_factor, min_insync_replicas)
    try:
        view = read_cluster(admin, layout)
        replication = resolve_replication(layout, view.cluster_size)
    except ReplicationError as error:
        raise fail(str(error)) from error
    except KafkaException as error:
        message = f"could not check topics at {settings.bootstrap_servers}: {error}"
        raise fail(message) from error
    problems = check_topics(view, layout, replication)
    if as_json:
        report = {
            "healthy": not problems,
            "brokers": replication.brokers,
            "replication_factor": replication.factor,
            "min_insync_replicas": replication.min_insync_replicas,
            "warnings": list(replication.warnings),
            "problems": [
                {**dataclasses.asdict(problem), "partitions": list(problem.partitions)}
                for problem in problems
            ],
        }
        typer.echo(json.dumps(report, indent=2))
    else:
        _warn(replication.warnings)
        for problem in problems:
            typer.echo(problem.line())
        typer.echo(
            f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
            if problems
            else f"all {len(layout.specs())} topics healthy"
        )
        typer.echo(
            f"checked against replication factor {replication.factor}, min.insync.replicas "
            f"{replication.min_insync_replicas}, {replication.brokers} broker(s)"
        )
    if problems:
        raise typer.Exit(ExitCode.FINDING)


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
        raise typer.Exit(ExitCode.FINDING)
