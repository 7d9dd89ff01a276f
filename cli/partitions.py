"""`kairos partitions`: who fires which schedules partition, how far behind, and the group."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import JsonAliasOption, OutputOption, chosen, render
from kairos.cli.reading import wide_console
from kairos.streams.kafka.ownership import OwnershipInfo
from kairos.streams.kafka.partition_status import (
    GroupStatus,
    PartitionStatus,
    PartitionStatusError,
    group_status_document,
    read_group_status,
)
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.readers.schedule_reader import ScheduleReader, ScheduleReadError
from kairos.streams.wire.codec import make_codecs

GroupOption = Annotated[
    str | None,
    typer.Option(
        "--group-id",
        envvar="KAIROS_TICKER_GROUP",
        help="Consumer group of the tickers; default: the deployment's, <topic prefix>tickers.",
        show_default=False,
    ),
]


TeamOption = Annotated[
    str | None,
    typer.Option(
        "--team",
        help="Only the partitions holding schedules of this team (the schedules' owner), with "
        "how many; reads the schedules topic.",
        show_default=False,
    ),
]


def partitions(
    context: typer.Context,
    group_id: GroupOption = None,
    team: TeamOption = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """Show each schedules partition's ticker, lag and next due fire, and the tickers' group.

    Exits 1 when a partition (of the team's, with --team) has no ticker: nobody fires its
    schedules.
    """
    chosen_output = chosen(output, as_json)
    settings = kafka_settings(context)
    try:
        status = read_group_status(settings, group_id or settings.deployment_id(TICKER_GROUP))
        held = None if team is None else _team_schedules(settings, team)
    except (PartitionStatusError, ScheduleReadError) as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    if held is not None:
        kept = tuple(p for p in status.partitions if p.partition in held)
        status = replace(status, partitions=kept)
    document = group_status_document(status)
    if held is not None:
        document["team"] = team
        for entry in document["partitions"]:
            entry["team_schedules"] = held[entry["partition"]]
    render(document, chosen_output, lambda: _print(status, wide_console(), held))
    if status.unowned:
        raise typer.Exit(ExitCode.FINDING)


def _team_schedules(settings: KafkaSettings, team: str) -> Counter[int]:
    """How many schedules owned by `team` each partition holds (only those holding some)."""
    snapshot = ScheduleReader(settings, make_codecs()).read_all()
    return Counter(
        stored.partition for stored in snapshot.schedules.values() if stored.schedule.owner == team
    )


def _print(status: GroupStatus, console: Console, held: Counter[int] | None = None) -> None:
    members = len(status.members)
    state_style = "green" if status.state == "stable" else "bold yellow"
    console.print(
        f"group [bold]{status.group_id}[/] on {status.topic}: [{state_style}]{status.state}[/], "
        f"{members} member{'s' if members != 1 else ''}",
    )
    for member in status.members:
        owned = ",".join(map(str, member.partitions)) or "none"
        console.print(f"  {member.instance} on {member.host}: partitions {owned}")
    table = Table(show_edge=False, pad_edge=False)
    for header in (
        "PARTITION",
        "OWNER",
        "SINCE",
        "SCHEDULES",
        "NEXT DUE",
        "OFFSET",
        "LAG",
        "CHANGELOG LAG",
        "LAST LATENESS",
        "MODE",
        *(() if held is None else ("TEAM'S",)),
    ):
        table.add_column(header, no_wrap=True)
    now = datetime.now(UTC)
    for p in status.partitions:
        row = _row(p, now) + ([] if held is None else [str(held[p.partition])])
        table.add_row(*row, style="bold red" if p.owner is None else None)
    console.print(table)
    waiting = [p.partition for p in status.partitions if p.owner and not p.reported_by_owner]
    if waiting:
        console.print(
            f"partition(s) {', '.join(map(str, waiting))}: the owner has not committed since it "
            "took over, so SINCE and SCHEDULES are not known yet (it reports with its next fire)",
        )
    if status.unowned:
        console.print(
            f"[bold red]NO OWNER[/] for partition(s) {', '.join(map(str, status.unowned))}: "
            "no ticker fires their schedules (their runs wait, late, until one does). Start a "
            "ticker (`kairos ticker`), or look again once the group is stable.",
        )


def _row(p: PartitionStatus, now: datetime) -> list[str]:
    # Only what the current owner reported; a previous owner's figures would mislead here.
    info = p.ownership if p.reported_by_owner else None
    lateness = info.last_fire_lateness_ms if info else None
    return [
        str(p.partition),
        p.owner or "NO OWNER",
        f"{_span(now - info.since)} ago" if info else "-",
        str(info.schedules) if info else "-",
        _due(info.next_due, now) if info and info.next_due else "-",
        "-" if p.committed_offset is None else str(p.committed_offset),
        "-" if p.lag is None else str(p.lag),
        "-" if p.changelog_lag is None else str(p.changelog_lag),
        "-" if lateness is None else f"{lateness} ms",
        # The mode its changes were last judged in, whichever owner committed last.
        _mode(p.ownership),
    ]


def _mode(info: OwnershipInfo | None) -> str:
    if info is None or info.mode is None:
        return "-"
    return f"{info.mode.value} from {info.mode_since}"


def _due(instant: datetime, now: datetime) -> str:
    # Relative, as it was when the owner last committed; --json has the instant.
    return f"in {_span(instant - now)}" if instant >= now else f"{_span(now - instant)} ago"


def _span(span: timedelta) -> str:
    seconds = max(0, int(span.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
