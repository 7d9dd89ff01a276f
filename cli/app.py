"""The `kairos` command: one typer application, one module per command group."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from kairos.cli import (
    acls,
    apply,
    audit,
    calendars,
    concurrency,
    console,
    dev,
    executor,
    notifier,
    partitions,
    preview,
    replay,
    reruns,
    runs,
    schedules,
    teams,
    ticker,
    topics,
)
from kairos.cli.connection import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_SCHEDULES_PARTITIONS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOPIC_PREFIX,
    ConnectionFlags,
)
from kairos.cli.exit_codes import COULD_NOT_RUN_ERRORS, ExitCode, error_line
from kairos.cli.log_format import checked_log_format, use_log_format
from kairos.services.build import installed_version

app = typer.Typer(
    name="kairos",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"kairos {installed_version()}")
        raise typer.Exit()


_VersionOption = Annotated[
    bool,
    typer.Option(
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the installed version of Kairos and exit.",
    ),
]


_BootstrapServersOption = Annotated[
    str | None,
    typer.Option(
        help="Kafka bootstrap servers, host:port[,host:port]; env KAIROS_BOOTSTRAP_SERVERS, "
        f"else bootstrap.servers of --kafka-config, else {DEFAULT_BOOTSTRAP}.",
        show_default=False,
    ),
]
_KafkaConfigOption = Annotated[
    Path | None,
    typer.Option(
        help="A librdkafka properties file (key=value lines, # comments) whose properties "
        "reach every Kafka client: security.protocol, sasl.*, ssl.*, …; env "
        "KAIROS_KAFKA_CONFIG. KAIROS_KAFKA_<PROPERTY> variables override it "
        "(KAIROS_KAFKA_SASL_MECHANISM -> sasl.mechanism).",
        show_default=False,
    ),
]
_TopicPrefixOption = Annotated[
    str | None,
    typer.Option(
        help="Prefix of every topic, group and transactional id: the deployment's namespace; "
        f"env KAIROS_TOPIC_PREFIX, default {DEFAULT_TOPIC_PREFIX!r}.",
        show_default=False,
    ),
]
_SchedulesPartitionsOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Partitions of the schedules topic: the granularity of ticker ownership; env "
        f"KAIROS_SCHEDULES_PARTITIONS, default {DEFAULT_SCHEDULES_PARTITIONS}.",
        show_default=False,
    ),
]
_TimeoutOption = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help="Seconds a one-shot command waits for the broker to answer; env "
        f"KAIROS_TIMEOUT, default {DEFAULT_TIMEOUT_S:g}.",
        show_default=False,
    ),
]
_SigningKeyOption = Annotated[
    Path | None,
    typer.Option(
        help="The team's signing key (`kairos teams keygen`): every schedule change this "
        "command publishes is signed with it, as a deployment that enforces ownership "
        "requires (docs/teams.md); env KAIROS_SIGNING_KEY.",
        show_default=False,
    ),
]


_LogFormatOption = Annotated[
    str,
    typer.Option(
        envvar="KAIROS_LOG_FORMAT",
        help="text, or json: one JSON object a line, with run_id, schedule_id, owner and "
        "partition as fields where a line is about one run.",
        callback=checked_log_format,
    ),
]


@app.callback()
def deployment(
    context: typer.Context,
    bootstrap_servers: _BootstrapServersOption = None,
    kafka_config: _KafkaConfigOption = None,
    topic_prefix: _TopicPrefixOption = None,
    schedules_partitions: _SchedulesPartitionsOption = None,
    timeout: _TimeoutOption = None,
    signing_key: _SigningKeyOption = None,
    log_format: _LogFormatOption = "text",
    _version: _VersionOption = False,
) -> None:
    """Kairos: every scheduled run happens — late, never lost, never fired twice.

    The options before the command name the deployment's Kafka cluster; later ones win over
    earlier ones: defaults < --kafka-config file < KAIROS_KAFKA_* < KAIROS_* < these options.
    """
    use_log_format(log_format)
    context.obj = ConnectionFlags(
        bootstrap_servers, kafka_config, topic_prefix, schedules_partitions, timeout, signing_key
    )


app.add_typer(dev.app, name="dev")
app.command("preview")(preview.preview)
app.add_typer(topics.app, name="topics")
app.command("ticker")(ticker.ticker)
app.command("executor")(executor.executor)
app.command("apply")(apply.apply)
app.command("acls")(acls.acls)
schedules.app.command("trigger")(reruns.trigger)
schedules.app.command("backfill")(reruns.backfill)
app.add_typer(schedules.app, name="schedules")
app.add_typer(calendars.app, name="calendars")
app.add_typer(teams.app, name="teams")
app.add_typer(concurrency.app, name="concurrency")
app.command("partitions")(partitions.partitions)
app.command("console")(console.console)
app.command("notifier")(notifier.notifier)
app.command("replay")(replay.replay)
app.add_typer(audit.app, name="audit")
app.add_typer(runs.app, name="runs")


def main() -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        app()
    except COULD_NOT_RUN_ERRORS as error:
        # Commands say how to fix what they expect; whatever else of these escapes is still one
        # line a script can read, and the could-not-run code, never a traceback.
        typer.echo(f"error: {error_line(error)}", err=True)
        sys.exit(ExitCode.COULD_NOT_RUN)
