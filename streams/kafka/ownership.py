"""Who owns a schedules partition, carried in the metadata of the offsets a ticker commits.

Every firing transaction commits an offset for every owned partition (that commit is the
fence), so the offset's metadata is as fresh as the owner's last transaction and costs nothing
extra. `kairos partitions` reads it back with the committed offsets.

It also says which ownership mode judged the partition's changes, and from which offset: a
ticker refuses a partition last committed in another mode (`mode_refusal`), so one deployment
runs one mode, and readers know which changes a signed ticker took (`Judged.verified_team`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from enum import StrEnum


class Ownership(StrEnum):
    """The ownership mode a deployment's tickers run in (docs/teams.md)."""

    OPEN = "open"
    """Any change anyone can publish is taken (one team, or a trusted few)."""
    SIGNED = "signed"
    """Every change must be signed by a registered team that may make it (docs/teams.md)."""


@dataclass(frozen=True)
class OwnershipInfo:
    instance: str
    host: str
    since: datetime
    """When this owner was assigned the partition."""
    schedules: int
    next_due: datetime | None
    last_fire_lateness_ms: int | None
    """Due instant to committed fire, for the last occurrence fired on this partition."""
    changelog_offset: int | None
    """The changelog offset just past this transaction's records on the partition (or past the
    owner's restore when it wrote none): a later owner's restore reads at least that far. The
    changelog's end minus it is the lag."""
    mode: Ownership | None = None
    """The mode the owner judges the partition's changes in; `None` in metadata written before
    the mode was recorded."""
    mode_since: int | None = None
    """The first schedules offset judged in `mode` without a break: where the owner that took
    the partition over from another mode (or from metadata without one) started."""

    def encode(self) -> str:
        # Shallow: asdict deep-copies every value, per partition per transaction.
        fields = {field.name: getattr(self, field.name) for field in dataclass_fields(self)}
        fields["since"] = self.since.isoformat()
        fields["next_due"] = self.next_due.isoformat() if self.next_due else None
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> OwnershipInfo | None:
        """The info in an offset's metadata; `None` for metadata Kairos did not write."""
        if not text:
            return None
        try:
            fields = json.loads(text)
            fields["since"] = datetime.fromisoformat(fields["since"])
            if fields["next_due"] is not None:
                fields["next_due"] = datetime.fromisoformat(fields["next_due"])
            if fields.get("mode") is not None:
                fields["mode"] = Ownership(fields["mode"])
            return cls(**fields)
        except (ValueError, TypeError, KeyError):
            return None


def mode_refusal(
    partition: int,
    previous: OwnershipInfo | None,
    mode: Ownership,
    switching_from: Ownership | None,
) -> str | None:
    """Why a ticker in `mode` may not own `partition`, whose committed metadata is `previous`;
    `None` when it may: never committed, committed without a mode (an upgrade: once, since its
    first commit records the mode), in `mode`, or in the mode the deployment is `switching_from`.
    """
    last = None if previous is None else previous.mode
    if last is None or last in (mode, switching_from):
        return None
    assert previous is not None
    return (
        f"schedules partition {partition} was last committed in ownership mode {last.value!r} "
        f"(by ticker {previous.instance!r}) but this ticker runs --ownership {mode.value}: run "
        f"every ticker of a deployment in one mode (start this one with --ownership "
        f"{last.value}), or switch the deployment by starting its tickers with --ownership "
        f"{mode.value} --ownership-from {last.value} (docs/teams.md)"
    )


def judged_from(previous: OwnershipInfo | None, mode: Ownership, start: int) -> int:
    """The `mode_since` of an owner in `mode` that takes changes from offset `start`: the
    previous owner's when it judged in the same mode, else `start`."""
    if previous is not None and previous.mode is mode and previous.mode_since is not None:
        return min(previous.mode_since, start)
    return start


@dataclass(frozen=True)
class Judged:
    """What the tickers committed for one schedules partition, as readers read it."""

    committed_offset: int | None
    """The next schedules offset the owner's state reflects: every change before it was taken
    or refused (`None` before the first commit)."""
    mode: Ownership | None
    mode_since: int | None
    """The mode the partition's changes were judged in from this offset on (`OwnershipInfo`)."""

    @classmethod
    def of(cls, committed_offset: int | None, info: OwnershipInfo | None) -> Judged:
        if info is None:
            return cls(committed_offset, None, None)
        return cls(committed_offset, info.mode, info.mode_since)

    def verified_team(self, offset: int, team: str | None) -> str | None:
        """The team whose signature a signed ticker verified on the change it took at `offset`
        (`team`: the record's `kairos-team`); `None` when no ticker did: taken unsigned, judged
        in open mode or before `mode_since`, or not judged yet.

        A signed ticker refuses every record whose named team's signature does not verify,
        whatever the change, so on a change it took the header names the team it verified."""
        if team is None or self.mode is not Ownership.SIGNED or self.mode_since is None:
            return None
        judged = self.committed_offset is not None and offset < self.committed_offset
        return team if judged and offset >= self.mode_since else None


NOT_JUDGED = Judged(None, None, None)
"""A partition whose tickers committed nothing a reader could read: no change on it was taken
by a ticker the reader knows of."""
