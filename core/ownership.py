"""Which team may make which schedule change, when a deployment enforces ownership.

Pure: the signature has been checked before (`kairos.streams.wire.signing` names the team whose
key signed the record); these rules decide whether that team may make that change, from what
the ticker holds for the schedule. docs/teams.md states them for users:

- A schedule belongs to the team its `owner` names. A team creates, changes, pauses, resumes,
  deletes and re-runs only schedules it owns, and only names itself as the owner.
- A schedule created before ownership was enforced, with no owner, belongs to no team: only an
  administrators' team may change it (and give it to a team by naming one as owner).
- An administrators' team may change any schedule, which is how a schedule moves between teams.
- An id outlives its schedule: once deleted (or quarantined), only its last owner or an
  administrators' team creates it again. An administrators' team creating it with another owner
  hands it on; a team cannot take another team's id by creating it between a delete and a
  re-creation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from kairos.core.quotas import UNLIMITED, Quota

TEAM_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
"""Lower-case letters, digits and inner hyphens, at most 63 characters: a DNS label, so a team
name is also safe in a topic, a principal or a metric label."""

PUBLIC_KEY_BYTES = 32
"""An Ed25519 public key's raw size (RFC 8032)."""


class TeamDefinitionError(ValueError):
    """A team registration that cannot be registered; the message says what to fix."""


@dataclass(frozen=True)
class Team:
    """A registered team: the keys its changes are signed with, and its quota."""

    name: str
    public_keys: tuple[bytes, ...]
    admin: bool = False
    quota: Quota = UNLIMITED

    def __post_init__(self) -> None:
        if not TEAM_NAME.fullmatch(self.name):
            raise TeamDefinitionError(
                f"team name {self.name!r}: use lower-case letters, digits and inner hyphens, "
                "at most 63 characters (e.g. payments-eu)"
            )
        if not self.public_keys:
            raise TeamDefinitionError(
                f"team {self.name!r} has no public key: register at least one "
                "(`kairos teams keygen` makes a key pair)"
            )
        for key in self.public_keys:
            if len(key) != PUBLIC_KEY_BYTES:
                raise TeamDefinitionError(
                    f"team {self.name!r}: a public key of {len(key)} bytes; an Ed25519 public "
                    f"key is {PUBLIC_KEY_BYTES} raw bytes"
                )


class Change(StrEnum):
    """What a schedule change does to the schedule the ticker holds."""

    CREATE = "create"
    OVERWRITE = "overwrite"
    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"
    TOMBSTONE = "tombstone"
    RERUN = "re-run"


@dataclass(frozen=True)
class Held:
    """The schedule as the ticker holds it before the change; `None` when it holds none."""

    owner: str | None
    paused: bool


def upsert_change(held: Held | None, paused: bool) -> Change:
    """What a change carrying a whole definition (`paused` its flag) does to `held`."""
    if held is None:
        return Change.CREATE
    if paused != held.paused:
        return Change.PAUSE if paused else Change.RESUME
    return Change.OVERWRITE


def refusal(
    signer: Team,
    schedule_id: str,
    change: Change,
    held: Held | None,
    new_owner: str | None,
    *,
    last_owner: str | None = None,
) -> str | None:
    """Why `signer` may not make `change` to `schedule_id`, or `None` when it may.

    `new_owner` is the owner the change's definition names (`None` for a delete or re-run).
    `last_owner` is the team that owned the id when it was last deleted or quarantined, kept
    with its floor, when the ticker holds no schedule under it (`None`: none, or no owner).
    """
    if signer.admin:
        return None
    if change is Change.CREATE and last_owner not in (None, signer.name):
        return (
            f"schedule id {schedule_id!r} was team {last_owner!r}'s until it was deleted or "
            "quarantined: only that team or an administrators' team may create it again; team "
            f"{signer.name!r} may not create it (choose another id, or ask an administrator to "
            "hand it on)"
        )
    if held is not None and held.owner != signer.name:
        whose = (
            f"belongs to team {held.owner!r}"
            if held.owner is not None
            else "has no owner (created before ownership was enforced): only an administrators' "
            "team may change it, or give it to a team by naming one as its owner"
        )
        return f"schedule {schedule_id!r} {whose}; team {signer.name!r} may not {change} it"
    carries_definition = change in (Change.CREATE, Change.OVERWRITE, Change.PAUSE, Change.RESUME)
    if carries_definition and new_owner != signer.name:
        named = "no owner" if new_owner is None else f"owner {new_owner!r}"
        return (
            f"the definition of {schedule_id!r} names {named} but team {signer.name!r} "
            f"signed it: a team may {change} only its own schedules; set owner: {signer.name}"
        )
    return None
