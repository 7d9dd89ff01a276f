"""`kairos teams set-quota|quota`: a team's quota, and where its schedules stand against it.

The tickers judge a quota per schedules partition (`kairos.core.quotas`), so `quota` shows the
use of each partition holding the team's schedules beside its share: the partition that fills
first is where the next change is refused.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kairos.cli.options import fail, kafka_settings, refused
from kairos.cli.output import JsonAliasOption, OutputOption, chosen, print_table, render
from kairos.cli.schedules import ChangedByOption, changed_by_or_default
from kairos.core.errors import KairosError
from kairos.core.ownership import Team
from kairos.core.quotas import (
    MAX_LIMIT,
    NO_USE,
    Quota,
    Trigger,
    Use,
    partition_share,
    schedules_use,
)
from kairos.streams.kafka.acls import Role
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.readers.team_events import TeamFeed, publish_team_change
from kairos.streams.wire.codec import make_codecs

TeamArgument = Annotated[str, typer.Argument(help="The team's name, e.g. payments-eu.")]
_NO_LIMIT = ("none", "unlimited")

LimitOption = Annotated[
    str | None,
    typer.Option(
        help="A limit (0 or more), or `none` for no limit; left out: kept as it is.",
        show_default=False,
    ),
]


def _limit(option: str, text: str | None, kept: int | None) -> int | None:
    if text is None:
        return kept
    if text.lower() in _NO_LIMIT:
        return None
    how = f"give a whole number from 0 to {MAX_LIMIT}, or `none` for no limit"
    try:
        limit = int(text)
    except ValueError:
        raise fail(f"{option} {text!r}: {how}") from None
    if not 0 <= limit <= MAX_LIMIT:
        raise fail(f"{option} {limit}: {how}")
    return limit


def registered_team(settings: KafkaSettings, team: str, role: Role) -> Team | None:
    """The team as the teams topic registers it now; `None` when it is not registered. A
    refused read names the grant `role` lacks."""
    try:
        with TeamFeed(settings) as feed:
            change = feed.refresh().get(team)
    except KairosError as error:
        raise fail(refused(settings, error, role) or str(error)) from error
    return None if change is None else change.team


def publish_team(
    settings: KafkaSettings, team: str, registered: Team | None, changed_by: str | None
) -> None:
    """Publish `team`'s registration (`None`: its removal); a refused write names the grant an
    operator needs."""
    try:
        publish_team_change(settings, team, registered, changed_by_or_default(changed_by))
    except KairosError as error:
        raise fail(refused(settings, error, Role.OPERATOR) or str(error)) from error


def set_quota(
    context: typer.Context,
    team: TeamArgument,
    max_schedules: LimitOption = None,
    max_fires_per_minute: LimitOption = None,
    changed_by: ChangedByOption = None,
) -> None:
    """Limit a registered team's schedules and fires a minute (its keys are kept). A change
    over the quota is refused by the tickers from then on; what is held already stays."""
    if max_schedules is None and max_fires_per_minute is None:
        raise fail("give --max-schedules, --max-fires-per-minute or both (`none`: no limit)")
    settings = kafka_settings(context)
    current = registered_team(settings, team, Role.OPERATOR)
    if current is None:
        raise fail(f"team {team!r} is not registered; register it first (`kairos teams put`)")
    quota = Quota(
        _limit("--max-schedules", max_schedules, current.quota.max_schedules),
        _limit("--max-fires-per-minute", max_fires_per_minute, current.quota.max_fires_per_minute),
    )
    updated = Team(current.name, current.public_keys, current.admin, quota)
    publish_team(settings, team, updated, changed_by)
    typer.echo(f"team {team}: {describe_quota(quota)}")


def describe_quota(quota: Quota) -> str:
    def said(limit: int | None, what: str) -> str:
        return f"no limit of {what}" if limit is None else f"at most {limit} {what}"

    schedules = said(quota.max_schedules, "schedules")
    return f"{schedules}, {said(quota.max_fires_per_minute, 'fires a minute')}"


def quota(
    context: typer.Context,
    team: TeamArgument,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """TEAM's quota and its use of each schedules partition holding its schedules, beside the
    partition's share (read from the schedules topic: what the tickers hold once they took
    every change on it)."""
    settings = kafka_settings(context)
    registered = registered_team(settings, team, Role.PRODUCER)
    if registered is None:
        raise fail(f"team {team!r} is not registered (`kairos teams list` shows who is)")
    try:
        snapshot = ScheduleReader(settings, make_codecs()).read_all()
    except KairosError as error:
        raise fail(str(error)) from error
    triggers: dict[int, list[Trigger]] = {}
    for stored in snapshot.schedules.values():
        if stored.schedule.owner == team:
            triggers.setdefault(stored.partition, []).append(Trigger.of(stored.schedule))
    use = {partition: schedules_use(held) for partition, held in triggers.items()}
    document = _quota_document(registered, use, snapshot.partitions)
    render(document, chosen(output, as_json), lambda: _print(document))


def _quota_document(team: Team, use: dict[int, Use], partitions: int) -> dict[str, Any]:
    limits = {
        "schedules": team.quota.max_schedules,
        "fires_per_minute": team.quota.max_fires_per_minute,
    }
    shares = {
        what: None if limit is None else partition_share(limit, partitions)
        for what, limit in limits.items()
    }
    total = sum(use.values(), NO_USE)
    return {
        "team": team.name,
        "quota": limits,
        "partitions": partitions,
        "share_per_partition": shares,
        "use": {"schedules": total.schedules, "fires_per_minute": total.fires_per_minute},
        "by_partition": [
            {
                "partition": partition,
                "schedules": one.schedules,
                "fires_per_minute": one.fires_per_minute,
            }
            for partition, one in sorted(use.items())
        ],
    }


def _print(document: dict[str, Any]) -> None:
    shares = document["share_per_partition"]

    def against(value: int, what: str) -> str:
        share = shares[what]
        return str(value) if share is None else f"{value}/{share}"

    quota = Quota(document["quota"]["schedules"], document["quota"]["fires_per_minute"])
    total = document["use"]
    typer.echo(
        f"team {document['team']}: {describe_quota(quota)}; holds {total['schedules']} "
        f"schedules that fire up to {total['fires_per_minute']} times a minute"
    )
    typer.echo(
        f"each of the {document['partitions']} partitions holds a share: a change is refused "
        "where it would take more than the partition's share"
    )
    rows = [
        [
            str(entry["partition"]),
            against(entry["schedules"], "schedules"),
            against(entry["fires_per_minute"], "fires_per_minute"),
        ]
        for entry in document["by_partition"]
    ]
    headers = ["PARTITION", "SCHEDULES/SHARE", "FIRES A MINUTE/SHARE"]
    print_table(headers, rows)
