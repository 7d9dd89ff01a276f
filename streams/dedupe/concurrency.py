"""Concurrency groups and owners' turns in the dedupe store: what `acquire` starts.

A run's groups (`kairos.core.concurrency.run_groups`) are written beside it when it is claimed,
and its owner in its row; the limits are rows an administrator sets (`kairos concurrency set`).
`acquire` reads the limits and what each limited group is running under one lock, so two
executors never both take a group's last place; the runs a full group holds back stay ready, in
their due order.

Owners take turns (`kairos.core.concurrency.choose_starts`): the store reads each owner's first
due runs, at most as many as the acquire may start, through the index on (state, owner, next_ms,
nominal_ms): one seek per owner with ready runs, never a scan of a herd. The share cap is kept
without the lock: executors acquiring at one instant may each start a run past it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, ClassVar

from kairos.core.concurrency import (
    OWNER_GROUP,
    Candidate,
    GroupStatus,
    Running,
    check_limit,
    choose_starts,
    parse_group,
    statuses,
)
from kairos.core.instants import epoch_ms
from kairos.streams.dedupe.base import RunRequest
from kairos.streams.dedupe.database import Connection, Database

_OWNERS_PER_STATEMENT = 50
"""Owners' heads read per statement: SQLite takes at most 500 parts of a UNION."""
# Owner after owner, each found by one seek of the index (a loose index scan): neither database
# skips through an index by itself, and a herd's owner has as many entries as runs.
_READY_OWNERS = """WITH RECURSIVE owners (owner) AS (
    SELECT MIN(owner) FROM kairos_runs WHERE state = 'ready'
    UNION ALL
    SELECT (SELECT MIN(r.owner) FROM kairos_runs r WHERE r.state = 'ready' AND r.owner > o.owner)
    FROM owners o WHERE o.owner IS NOT NULL)
SELECT owner FROM owners WHERE owner IS NOT NULL"""


def _not_in_groups(count: int) -> str:
    if not count:
        return ""
    return (
        " AND NOT EXISTS (SELECT 1 FROM kairos_run_groups g WHERE g.run_id = kairos_runs.run_id "
        f"AND g.group_key IN ({', '.join('?' * count)}))"
    )


def _not_among(count: int) -> str:
    return f" AND run_id NOT IN ({', '.join('?' * count)})" if count else ""


class ConcurrencyLimits(Database):
    """The concurrency-group methods of `SqlDedupeStore` (a mixin on its `Database`)."""

    skip_locked: ClassVar[str]

    @abstractmethod
    def _lock_concurrency(self, conn: Connection) -> None:
        """Serialise, until the transaction ends, every start of a run in a limited group."""

    def set_concurrency_limit(self, group: str, max_running: int, now: datetime) -> None:
        """Limit `group` to `max_running` runs at once, from the next start on."""
        key = parse_group(group)
        check_limit(key, max_running)

        def work(conn: Connection) -> None:
            conn.execute(
                self.q(
                    "INSERT INTO kairos_concurrency_limits (group_key, max_running, updated_ms) "
                    "VALUES (?, ?, ?) ON CONFLICT (group_key) DO UPDATE SET "
                    "max_running = excluded.max_running, updated_ms = excluded.updated_ms"
                ),
                (key, max_running, epoch_ms(now)),
            )

        self.transaction(work)

    def remove_concurrency_limit(self, group: str) -> bool:
        """Lift `group`'s limit; False if it had none."""
        key = parse_group(group)

        def work(conn: Connection) -> bool:
            cursor = conn.execute(
                self.q("DELETE FROM kairos_concurrency_limits WHERE group_key = ?"), (key,)
            )
            return cursor.rowcount > 0

        return self.transaction(work)

    def concurrency(self, now: datetime) -> Sequence[GroupStatus]:
        """Every limited group: its limit, how many of its runs run, how many wait (due)."""

        def work(conn: Connection) -> Sequence[GroupStatus]:
            limits = self._limits(conn)
            if not limits:
                return []
            counted = (
                "SELECT g.group_key, COUNT(*) FROM kairos_run_groups g JOIN kairos_runs r "
                "ON r.run_id = g.run_id WHERE {where} AND g.group_key IN ({keys}) "
                "GROUP BY g.group_key"
            )
            keys = ", ".join("?" * len(limits))
            running = conn.execute(
                self.q(counted.format(where="r.state = 'running'", keys=keys)), (*limits,)
            ).fetchall()
            waiting = conn.execute(
                self.q(counted.format(where="r.state = 'ready' AND r.next_ms <= ?", keys=keys)),
                (epoch_ms(now), *limits),
            ).fetchall()
            return statuses(limits, dict(running), dict(waiting))

        return self.transaction(work)

    def _record_groups(self, conn: Connection, request: RunRequest) -> None:
        if not request.groups:
            return
        # One statement per run, not one per group: claims at 0.63-0.70x of no groups, not 0.58x
        # (bench/bench_dedupe_groups.py, SQLite).
        conn.execute(
            self.q(
                "INSERT INTO kairos_run_groups (group_key, run_id) VALUES "
                + ", ".join("(?, ?)" for _ in request.groups)
                + " ON CONFLICT (group_key, run_id) DO NOTHING"
            ),
            [value for group in request.groups for value in (group, request.run_id)],
        )

    def _startable(
        self, conn: Connection, now_ms: int, runners: Sequence[str], limit: int, share: float
    ) -> list[str]:
        """The ready runs due at `now_ms` to start now, at most `limit`, by owners' turns: all
        of them while no group is limited, else those whose limited groups have room."""
        limits = self._limits(conn)
        if limits:
            self._lock_concurrency(conn)
        running = Running(
            self._running_in(conn, list(limits)) if limits else {},
            self._running_owners(conn, runners),
        )
        owners = [owner for (owner,) in conn.execute(_READY_OWNERS).fetchall()]
        started: list[str] = []
        full = {group for group, most in limits.items() if running.groups.get(group, 0) >= most}
        while len(started) < limit:
            want = limit - len(started)
            # Runs of full groups are left out in SQL, so they never crowd a page of candidates.
            candidates, more = self._heads(conn, owners, (now_ms, runners, full, started, want))
            if limits:
                candidates = self._with_groups(conn, candidates)
            taken, now_full = choose_starts(candidates, running, limits, want, share)
            started += taken
            chosen = set(taken)
            running = _counted(running, [c for c in candidates if c.run_id in chosen])
            # A candidate is passed over only when a group filled up on this page: ask again
            # without that group's runs, unless no owner had more candidates than its page.
            if not more or now_full == full:
                break
            full = now_full
        return started

    def _heads(
        self,
        conn: Connection,
        owners: Sequence[str],
        asked: tuple[int, Sequence[str], Collection[str], Sequence[str], int],
    ) -> tuple[list[Candidate], bool]:
        """Each owner's first `want` ready runs due at `now_ms`, in due order, outside the `full`
        groups and not `started`; and whether some owner had that many (it may have more)."""
        now_ms, runners, full, started, want = asked
        part = (
            "SELECT * FROM (SELECT run_id, owner, next_ms, nominal_ms FROM kairos_runs "
            f"WHERE state = 'ready' AND owner = ? AND next_ms <= ? "
            f"AND runner IN ({', '.join('?' * len(runners))})"
            f"{_not_in_groups(len(full))}{_not_among(len(started))} "
            f"ORDER BY next_ms, nominal_ms LIMIT ?{self.skip_locked}) h{{n}}"
        )
        rest: list[Any] = [now_ms, *runners, *sorted(full), *started, want]
        # An owner whose own group is full has no candidate: its runs are not even read.
        open_owners = [owner for owner in owners if OWNER_GROUP + owner not in full]
        rows: list[Any] = []
        for first in range(0, len(open_owners), _OWNERS_PER_STATEMENT):
            chunk = open_owners[first : first + _OWNERS_PER_STATEMENT]
            sql = " UNION ALL ".join(part.format(n=n) for n in range(len(chunk)))
            rows += conn.execute(
                self.q(sql), [value for owner in chunk for value in (owner, *rest)]
            ).fetchall()
        per_owner: dict[str, int] = {}
        for _, owner, _, _ in rows:
            per_owner[owner] = per_owner.get(owner, 0) + 1
        candidates = [
            Candidate(run_id, owner, (), (next_ms, nominal))
            for run_id, owner, next_ms, nominal in rows
        ]
        return candidates, any(count >= want for count in per_owner.values())

    def _limits(self, conn: Connection) -> dict[str, int]:
        rows = conn.execute("SELECT group_key, max_running FROM kairos_concurrency_limits")
        return dict(rows.fetchall())

    def _running_in(self, conn: Connection, groups: list[str]) -> dict[str, int]:
        rows = conn.execute(
            self.q(
                "SELECT g.group_key, COUNT(*) FROM kairos_run_groups g JOIN kairos_runs r "
                "ON r.run_id = g.run_id WHERE r.state = 'running' "
                f"AND g.group_key IN ({', '.join('?' * len(groups))}) GROUP BY g.group_key"
            ),
            groups,
        ).fetchall()
        return dict(rows)

    def _running_owners(self, conn: Connection, runners: Sequence[str]) -> dict[str, int]:
        rows = conn.execute(
            self.q(
                "SELECT owner, COUNT(*) FROM kairos_runs WHERE state = 'running' "
                f"AND runner IN ({', '.join('?' * len(runners))}) GROUP BY owner"
            ),
            runners,
        ).fetchall()
        return dict(rows)

    def _with_groups(self, conn: Connection, candidates: list[Candidate]) -> list[Candidate]:
        if not candidates:
            return []
        rows = conn.execute(
            self.q(
                "SELECT run_id, group_key FROM kairos_run_groups "
                f"WHERE run_id IN ({', '.join('?' * len(candidates))})"
            ),
            [candidate.run_id for candidate in candidates],
        ).fetchall()
        groups: dict[str, list[str]] = {candidate.run_id: [] for candidate in candidates}
        for run_id, group in rows:
            groups[run_id].append(group)
        return [replace(c, groups=tuple(groups[c.run_id])) for c in candidates]


def _counted(running: Running, started: Sequence[Candidate]) -> Running:
    """`running` with the `started` candidates counted in their groups and owners."""
    groups, owners = dict(running.groups), dict(running.owners)
    for candidate in started:
        owners[candidate.owner] = owners.get(candidate.owner, 0) + 1
        for group in candidate.groups:
            groups[group] = groups.get(group, 0) + 1
    return Running(groups, owners)
