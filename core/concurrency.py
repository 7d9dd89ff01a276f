"""Concurrency groups and fair turns: which ready runs an executor starts, and in what order.

A run belongs to the group of its schedule's owner (`owner:payments`), to its owner's group of
each of its labels (`label:payments/warehouse=eu`) and to the shared group of each label
(`shared:warehouse=eu`). A label group is its owner's: a team that adds `warehouse: eu` to its
labels does not count in another team's limited group. A shared group spans owners, and counts
only once an administrator limits it (`kairos concurrency set shared:warehouse=eu 4`).
Executors sharing a dedupe store start a run only while every limited group it belongs to has
room; groups without a limit are not limited.

Owners take turns: the ready runs start round-robin across owners (runs without owner are one
more owner, `NO_OWNER`), each owner's in due order, so one team's herd does not delay another
team's runs by its own length; and while other owners' runs wait, an owner holding its share of
the pool (`owner_cap`) starts no more.

Pure: the store reads what is running and what is due, this module decides which may start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kairos.core.errors import KairosError

OWNER_GROUP = "owner:"
LABEL_GROUP = "label:"
SHARED_GROUP = "shared:"
MAX_GROUP_LENGTH = 512
DEFAULT_OWNER_SHARE = 0.5
"""The executors' `owner_share` unless set: see `owner_cap`."""
NO_OWNER = ""
"""The owner of runs whose schedule names none: they take their turns as one more owner."""
_HOW = (
    "write owner:OWNER, label:OWNER/KEY=VALUE (one team's runs with the label) or "
    "shared:KEY=VALUE (every team's runs with the label), e.g. owner:payments, "
    "label:payments/warehouse=eu, shared:warehouse=eu"
)


class ConcurrencyGroupError(KairosError):
    """A concurrency group or its limit is not valid; `group` is the text given."""

    def __init__(self, group: str, problem: str) -> None:
        self.group = group
        self.problem = problem
        super().__init__(f"concurrency group {group!r}: {problem}")


def parse_group(text: str) -> str:
    """`text` as a group key, or `ConcurrencyGroupError` saying how to write one."""
    if len(text) > MAX_GROUP_LENGTH:
        raise ConcurrencyGroupError(text[:40] + "...", f"longer than {MAX_GROUP_LENGTH} characters")
    if text.startswith(OWNER_GROUP):
        if not text[len(OWNER_GROUP) :]:
            raise ConcurrencyGroupError(text, f"names no owner; {_HOW}")
        return text
    if text.startswith(SHARED_GROUP):
        _label(text, text[len(SHARED_GROUP) :])
        return text
    if text.startswith(LABEL_GROUP):
        owner, slash, label = text[len(LABEL_GROUP) :].partition("/")
        if not slash or not owner or "=" in owner:
            raise ConcurrencyGroupError(
                text,
                "a label group is one team's: name the owner, label:OWNER/KEY=VALUE (e.g. "
                "label:payments/warehouse=eu); a group every team's runs with the label count "
                "in is shared:KEY=VALUE (e.g. shared:warehouse=eu)",
            )
        _label(text, label)
        return text
    raise ConcurrencyGroupError(text, _HOW)


def _label(text: str, label: str) -> None:
    key, equals, _ = label.partition("=")
    if not key or not equals:
        raise ConcurrencyGroupError(text, f"names no label KEY=VALUE; {_HOW}")


def check_limit(group: str, max_running: int) -> int:
    """`max_running` if it can limit a group (at least 1), else `ConcurrencyGroupError`."""
    if max_running < 1:
        raise ConcurrencyGroupError(
            group,
            f"a limit of {max_running} would hold every run back forever; give at least 1, "
            "or remove the limit",
        )
    return max_running


def run_groups(owner: str | None, labels: Mapping[str, str]) -> tuple[str, ...]:
    """The groups a run of a schedule with this owner and these labels belongs to."""
    pairs = [f"{key}={value}" for key, value in sorted(labels.items())]
    groups = [] if owner is None else [OWNER_GROUP + owner]
    if owner is not None:
        # Escaped so that the first `/` ends the owner: a label key may hold `/` too.
        qualified = owner.replace("%", "%25").replace("/", "%2F")
        groups += [f"{LABEL_GROUP}{qualified}/{pair}" for pair in pairs]
    groups += [SHARED_GROUP + pair for pair in pairs]
    return tuple(group for group in groups if len(group) <= MAX_GROUP_LENGTH)


def owner_of(groups: Sequence[str]) -> str:
    """The owner of a run in these groups (`run_groups`); `NO_OWNER` if it has none."""
    for group in groups:
        if group.startswith(OWNER_GROUP):
            return group[len(OWNER_GROUP) :]
    return NO_OWNER


@dataclass(frozen=True, slots=True)
class Candidate:
    """A run ready to start, with its owner, the groups it belongs to and when it is due."""

    run_id: str
    owner: str
    groups: tuple[str, ...]
    due: tuple[int, int]
    """Its next attempt's and nominal instants (epoch ms): its owner's runs start in this order."""


def round_robin(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Every owner's first candidate, then every owner's second, ...; each round in due order.

    `candidates` holds each owner's in due order (other owners' may come between)."""
    turns: dict[str, int] = {}
    ranked = []
    for candidate in candidates:
        turn = turns.get(candidate.owner, 0)
        turns[candidate.owner] = turn + 1
        ranked.append((turn, candidate.due, candidate))
    return [candidate for _, _, candidate in sorted(ranked, key=lambda r: (r[0], r[1]))]


def owner_cap(share: float, running: int, room: int) -> int:
    """The most runs one owner may hold while other owners' runs wait: `share` of the pool as
    one executor sees it, every run running among the runners it serves plus the `room` it is
    filling, and at least 1, so that every owner can run something."""
    return max(1, math.ceil(share * (running + room)))


@dataclass(frozen=True, slots=True)
class Running:
    """What runs now: by limited group and by owner (every owner's, among the runners served)."""

    groups: Mapping[str, int]
    owners: Mapping[str, int]


def choose_starts(
    candidates: Sequence[Candidate],
    running: Running,
    limits: Mapping[str, int],
    room: int,
    share: float,
) -> tuple[list[str], set[str]]:
    """Which of `candidates` start, at most `room`, in the order they start; and the groups full.

    The candidates take turns by owner (`round_robin`). One starts when every limited group it
    belongs to runs fewer than its limit, counting those started before it; one held back keeps
    its place, and those behind it are not held up. An owner holding `owner_cap` runs starts no
    more while another owner's candidate can start; once none can, the capped owners take the
    room left, still by turns, so that no place stays idle for the cap.
    """
    groups = {group: running.groups.get(group, 0) for group in limits}
    owners = dict(running.owners)
    cap = owner_cap(share, sum(running.owners.values()), room)
    full = {group for group, count in groups.items() if count >= limits[group]}
    started: list[str] = []
    capped: list[Candidate] = []
    for candidate in round_robin(candidates):
        if len(started) >= room:
            break
        limited = [group for group in candidate.groups if group in limits]
        if any(group in full for group in limited):
            continue
        if owners.get(candidate.owner, 0) >= cap:
            capped.append(candidate)
            continue
        started.append(candidate.run_id)
        owners[candidate.owner] = owners.get(candidate.owner, 0) + 1
        full |= _count_in(limited, groups, limits)
    for candidate in capped:
        limited = [group for group in candidate.groups if group in limits]
        if len(started) < room and not any(group in full for group in limited):
            started.append(candidate.run_id)
            full |= _count_in(limited, groups, limits)
    return started, full


def _count_in(limited: list[str], groups: dict[str, int], limits: Mapping[str, int]) -> set[str]:
    """Count one more run in each of `limited`; the groups that became full."""
    for group in limited:
        groups[group] += 1
    return {group for group in limited if groups[group] >= limits[group]}


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A limited group as the store sees it at one instant."""

    group: str
    max_running: int
    running: int
    waiting: int
    """Runs ready and due that the group's limit holds back (or may hold back)."""


def statuses(
    limits: Mapping[str, int], running: Mapping[str, int], waiting: Mapping[str, int]
) -> Sequence[GroupStatus]:
    """Every limited group's status, by group key."""
    return [
        GroupStatus(group, limits[group], running.get(group, 0), waiting.get(group, 0))
        for group in sorted(limits)
    ]
