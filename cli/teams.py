"""`kairos teams keygen|put|remove|list|rejections`: the teams that own schedules (docs/teams.md).

`set-quota` and `quota` (`kairos.cli.team_quotas`) limit a team's schedules and fires.

A team makes its key pair with `keygen` and hands the administrators only the public key; an
administrator registers it with `put` on the admin-only teams topic. Tickers run with
`--ownership signed` then take a schedule change only when its team's key signed it and the
team may make it and it keeps the team within its quota; `rejections` lists what they refused
of a team's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import Annotated

import typer

from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import JsonAliasOption, OutputOption, chosen, print_table, render
from kairos.cli.schedules import ChangedByOption
from kairos.cli.team_quotas import (
    TeamArgument,
    describe_quota,
    publish_team,
    quota,
    registered_team,
    set_quota,
)
from kairos.core.errors import KairosError
from kairos.core.ownership import Team, TeamDefinitionError
from kairos.core.quotas import UNLIMITED
from kairos.streams.kafka.acls import Role
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.team_events import TeamFeed
from kairos.streams.wire.signing import SigningKeyError, new_signing_key

app = typer.Typer(
    help="Register the teams that own schedules, their quotas, and read what was refused to them.",
    no_args_is_help=True,
)
app.command("set-quota")(set_quota)
app.command("quota")(quota)


def key_fingerprint(public_key: bytes) -> str:
    """A short name for a public key, as `list` shows it: SHA-256's first 8 bytes, hex."""
    return hashlib.sha256(public_key).hexdigest()[:16]


@app.command()
def keygen(
    team: TeamArgument,
    out: Annotated[Path, typer.Option(help="Where to write the private key (mode 600).")],
) -> None:
    """Make a team's key pair: the private key into --out, the public key printed for the
    administrators to register. Needs no broker."""
    try:
        text, signer = new_signing_key(team)
    except SigningKeyError as error:
        raise fail(str(error)) from error
    try:
        descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise fail(f"{out} exists: a key is never overwritten; choose another --out") from None
    except OSError as error:
        raise fail(f"cannot write {out}: {error.strerror}") from error
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    public = base64.b64encode(signer.public_key()).decode()
    typer.echo(f"private key of team {team} written to {out} (keep it secret)")
    typer.echo(f"public key: {public}")
    typer.echo(f"an administrator registers it with: kairos teams put {team} --public-key {public}")


@app.command()
def put(
    context: typer.Context,
    team: TeamArgument,
    public_key: Annotated[
        list[str],
        typer.Option(help="A public key as `keygen` printed it (base64); repeat while rotating."),
    ],
    admin: Annotated[
        bool, typer.Option(help="An administrators' team: may change any team's schedules.")
    ] = False,
    changed_by: ChangedByOption = None,
) -> None:
    """Register a team, or replace its keys: the keys given are all it has afterwards. Its
    quota, if it has one, is kept (`set-quota` changes it)."""
    try:
        keys = tuple(base64.b64decode(key, validate=True) for key in public_key)
        Team(team, keys, admin)
    except binascii.Error:
        message = "--public-key is not base64: pass the key as `kairos teams keygen` printed it"
        raise fail(message) from None
    except TeamDefinitionError as error:
        raise fail(str(error)) from error
    settings = kafka_settings(context)
    current = registered_team(settings, team, Role.OPERATOR)
    registered = Team(team, keys, admin, UNLIMITED if current is None else current.quota)
    publish_team(settings, team, registered, changed_by)
    typer.echo(f"team {team} registered with {len(keys)} key{'s' if len(keys) > 1 else ''}")


@app.command()
def remove(context: typer.Context, team: TeamArgument, changed_by: ChangedByOption = None) -> None:
    """Remove a team: every change signed by it is refused from then on. Its schedules stay,
    owned by a name no key signs for, until an administrators' team moves or deletes them."""
    publish_team(kafka_settings(context), team, None, changed_by)
    typer.echo(f"team {team} removed")


@app.command("list")
def list_teams(
    context: typer.Context, output: OutputOption = None, as_json: JsonAliasOption = False
) -> None:
    """Every registered team, with its keys' fingerprints."""
    settings = kafka_settings(context)
    try:
        with TeamFeed(settings) as feed:
            teams = feed.refresh()
    except KairosError as error:
        raise fail(str(error)) from error
    registered = [
        (change, change.team) for _, change in sorted(teams.items()) if change.team is not None
    ]
    document = [
        {
            "team": team.name,
            "admin": team.admin,
            "keys": [key_fingerprint(key) for key in team.public_keys],
            "max_schedules": team.quota.max_schedules,
            "max_fires_per_minute": team.quota.max_fires_per_minute,
            "changed_by": change.changed_by,
            "changed_at": change.changed_at.isoformat(),
        }
        for change, team in registered
    ]
    rows = [
        [
            team.name,
            "yes" if team.admin else "",
            " ".join(key_fingerprint(key) for key in team.public_keys),
            describe_quota(team.quota) if team.quota.limited else "",
            change.changed_at.isoformat(),
        ]
        for change, team in registered
    ]
    headers = ["TEAM", "ADMIN", "KEYS", "QUOTA", "CHANGED"]
    render(
        document,
        chosen(output, as_json),
        lambda: print_table(headers, rows),
    )


@app.command()
def rejections(
    context: typer.Context,
    team: TeamArgument,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """The schedule changes signed by TEAM that the tickers refused, and the notices no route of
    TEAM took (`kairos notifier`), oldest first, with why."""
    settings = kafka_settings(context)
    try:
        found = HistoryReader(settings).refused_changes(team)
    except KairosError as error:
        raise fail(str(error)) from error
    document = [
        {
            "schedule": refusal.key,
            "partition": refusal.source_partition,
            "offset": refusal.source_offset,
            "refused_at": refusal.dead_lettered_at.isoformat(),
            "reason": refusal.reason,
        }
        for refusal in found
    ]
    rows = [
        [refusal.dead_lettered_at.isoformat(), refusal.key, refusal.reason] for refusal in found
    ]
    render(
        document,
        chosen(output, as_json),
        lambda: print_table(["REFUSED", "SCHEDULE", "REASON"], rows),
    )
