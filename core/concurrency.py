"""Concurrency groups: at most N runs at once of an owner's, or of a label's, across executors.

A run belongs to the group of its schedule's owner (`owner:payments`) and to one group per label
(`label:warehouse=eu`). An administrator limits a group (`kairos concurrency set`); executors
sharing a dedupe store then start a run only while every limited group it belongs to has room,
and the runs held back wait in their due order. Groups without a limit are not limited.

Pure: the store reads what is running and what is due, this module decides which may start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kairos.core.errors import KairosError

OWNER_GROUP = "owner:"
LABEL_GROUP = "label:"
MAX_GROUP_LENGTH = 512


class ConcurrencyGroupError(KairosError):
    """A concurrency group or its limit is not valid; `group` is the text given."""

    def __init__(self, group: str, problem: str) -> None:
        self.group = group
        self.problem = problem
        super().__init__(f"concurrency group {group!r}: {problem}")


def parse_group(text: str) -> str:
    """`text` as a group key, or `ConcurrencyGroupError` saying how to write one."""
    how = "write owner:OWNER or label:KEY=VALUE (e.g. owner:payments, label:warehouse=eu)"
    if len(text) > MAX_GROUP_LENGTH:
        raise ConcurrencyGroupError(text[:40] + "...", f"longer than {MAX_GROUP_LENGTH} characters")
    if text.startswith(OWNER_GROUP):
        if not text[len(OWNER_GROUP) :]:
            raise ConcurrencyGroupError(text, f"names no owner; {how}")
        return text
    if text.startswith(LABEL_GROUP):
        key, equals, _ = text[len(LABEL_GROUP) :].partition("=")
        if not key or not equals:
            raise ConcurrencyGroupError(text, f"names no label KEY=VALUE; {how}")
        return text
    raise ConcurrencyGroupError(text, how)


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
    groups = [] if owner is None else [OWNER_GROUP + owner]
    groups += [f"{LABEL_GROUP}{key}={value}" for key, value in sorted(labels.items())]
    return tuple(group for group in groups if len(group) <= MAX_GROUP_LENGTH)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A run ready to start, with the groups it belongs to."""

    run_id: str
    groups: tuple[str, ...]


def within_limits(
    candidates: Iterable[Candidate],
    running: Mapping[str, int],
    limits: Mapping[str, int],
    room: int,
) -> tuple[list[str], set[str]]:
    """Which of `candidates` (in due order) may start, at most `room`; and the groups found full.

    A candidate starts when every limited group it belongs to runs fewer than its limit,
    counting the candidates started before it. One held back keeps its place: it is the first
    of its group to start when a run of the group ends. Others behind it are not held up.
    """
    counts = {group: running.get(group, 0) for group in limits}
    started: list[str] = []
    full = {group for group, count in counts.items() if count >= limits[group]}
    for candidate in candidates:
        if len(started) >= room:
            break
        limited = [group for group in candidate.groups if group in limits]
        if any(group in full for group in limited):
            continue
        started.append(candidate.run_id)
        for group in limited:
            counts[group] += 1
            if counts[group] >= limits[group]:
                full.add(group)
    return started, full


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
