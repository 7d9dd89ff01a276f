"""Options every command that talks to Kafka shares, with their environment defaults."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from kairos.streams.settings import KafkaSettings

BootstrapOption = Annotated[
    str,
    typer.Option(
        "--bootstrap-servers",
        envvar="KAIROS_BOOTSTRAP_SERVERS",
        help="Kafka bootstrap servers, host:port[,host:port].",
    ),
]
TopicPrefixOption = Annotated[
    str,
    typer.Option(
        "--topic-prefix", envvar="KAIROS_TOPIC_PREFIX", help="Prefix of every topic name."
    ),
]
PartitionsOption = Annotated[
    int,
    typer.Option(
        "--schedules-partitions",
        envvar="KAIROS_SCHEDULES_PARTITIONS",
        min=1,
        help="Partitions of the schedules topic: the granularity of ticker ownership.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
MetricsPortOption = Annotated[
    int | None,
    typer.Option(envvar="KAIROS_METRICS_PORT", help="Serve Prometheus metrics on this port."),
]
LogLevelOption = Annotated[
    str, typer.Option(envvar="KAIROS_LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR.")
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def kafka_settings(
    bootstrap_servers: str, topic_prefix: str, schedules_partitions: int = 12
) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=bootstrap_servers,
        topic_prefix=topic_prefix,
        schedules_partitions=schedules_partitions,
    )


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error the way every command does and return the exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def service_arguments(
    command: str,
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    flags: Iterable[tuple[str, object | None]],
) -> list[str]:
    """`kairos <command>` arguments of a service of this deployment: its instance, state and
    Kafka settings, then each flag whose value is not `None` (`None`: the flag's default)."""
    arguments = [
        command,
        "--instance",
        instance,
        "--state-dir",
        str(state_dir),
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
    ]
    for flag, value in flags:
        if value is not None:
            arguments += [flag, str(value)]
    return arguments
