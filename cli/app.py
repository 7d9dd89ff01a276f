"""The `kairos` command: one typer application, one module per command group."""

from __future__ import annotations

import logging

import typer

from kairos.cli import (
    acls,
    apply,
    audit,
    dev,
    executor,
    partitions,
    preview,
    replay,
    runs,
    schedules,
    ticker,
    topics,
)

app = typer.Typer(
    name="kairos",
    help="Kairos: every scheduled run happens — late, never lost, never fired twice.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(dev.app, name="dev")
app.command("preview")(preview.preview)
app.add_typer(topics.app, name="topics")
app.command("ticker")(ticker.ticker)
app.command("executor")(executor.executor)
app.command("apply")(apply.apply)
app.command("acls")(acls.acls)
app.add_typer(schedules.app, name="schedules")
app.command("partitions")(partitions.partitions)
app.command("replay")(replay.replay)
app.add_typer(audit.app, name="audit")
app.add_typer(runs.app, name="runs")


def main() -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app()
