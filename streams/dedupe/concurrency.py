"""Concurrency groups in the dedupe store: limits every executor sharing the store keeps.

A run's groups (`kairos.core.concurrency.run_groups`) are written beside it when it is claimed;
the limits are rows an administrator sets (`kairos concurrency set`). `acquire` reads the limits
and what each limited group is running under one lock, so two executors never both take a
group's last place; the runs a full group holds back stay ready, in their due order.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from kairos.core.concurrency import (
    Candidate,
    GroupStatus,
    check_limit,
    parse_group,
    statuses,
    within_limits,
)
from kairos.streams.dedupe.base import RunRequest
from kairos.streams.dedupe.database import Connection, Database, to_ms

_READY = "state = 'ready' AND next_ms <= ? AND runner IN ({runners})"


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
                (key, max_running, to_ms(now)),
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
                (to_ms(now), *limits),
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
        self, conn: Connection, now_ms: int, runners: Sequence[str], limit: int
    ) -> list[str]:
        """The ready runs due at `now_ms` to start now, at most `limit`, in due order: all of
        them while no group is limited, else those whose limited groups have room."""
        ready = _READY.format(runners=", ".join("?" * len(runners)))
        order = f" ORDER BY next_ms, nominal_ms LIMIT ?{self.skip_locked}"
        limits = self._limits(conn)
        if not limits:
            rows = conn.execute(
                self.q(f"SELECT run_id FROM kairos_runs WHERE {ready}{order}"),
                (now_ms, *runners, limit),
            ).fetchall()
            return [run_id for (run_id,) in rows]
        self._lock_concurrency(conn)
        running = self._running_in(conn, list(limits))
        started: list[str] = []
        full = {group for group, most in limits.items() if running.get(group, 0) >= most}
        while len(started) < limit:
            want = limit - len(started)
            # Runs of full groups are left out in SQL, so they never crowd a page of candidates.
            rows = conn.execute(
                self.q(
                    f"SELECT run_id FROM kairos_runs WHERE {ready}"
                    f"{_not_in_groups(len(full))}{_not_among(len(started))}{order}"
                ),
                (now_ms, *runners, *sorted(full), *started, want),
            ).fetchall()
            candidates = self._with_groups(conn, [run_id for (run_id,) in rows])
            taken, now_full = within_limits(candidates, running, limits, want)
            started += taken
            for candidate in candidates:
                if candidate.run_id in taken:
                    for group in candidate.groups:
                        running[group] = running.get(group, 0) + 1
            # A candidate is passed over only when a group filled up on this page: ask again
            # without that group's runs, unless the page was the last of the candidates.
            if len(rows) < want or now_full == full:
                break
            full = now_full
        return started

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

    def _with_groups(self, conn: Connection, run_ids: list[str]) -> list[Candidate]:
        if not run_ids:
            return []
        rows = conn.execute(
            self.q(
                "SELECT run_id, group_key FROM kairos_run_groups "
                f"WHERE run_id IN ({', '.join('?' * len(run_ids))})"
            ),
            run_ids,
        ).fetchall()
        groups: dict[str, list[str]] = {run_id: [] for run_id in run_ids}
        for run_id, group in rows:
            groups[run_id].append(group)
        return [Candidate(run_id, tuple(groups[run_id])) for run_id in run_ids]
