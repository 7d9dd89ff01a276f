"""`python` jobs: handlers a team registers in its own executor process.

    handlers = Handlers()

    @handlers.handler("record-settlement")
    def record_settlement(run: RunContext) -> None:
        db = run.transaction()          # the dedupe store's transaction: effectively once
        db.execute("INSERT INTO settlements (run_id, day) VALUES (%s, %s)",
                   (run.run_id, run.args["day"]))

A schedule runs it with `{"kind": "python", "handler": "record-settlement", "args": {…}}`.

**Who may call a handler.** A handler is a team's code, and any team can write a schedule
naming it, so each handler says whose runs may call it: `teams=("billing",)` (runs owned by
those teams), or `teams=ANY_TEAM` (every run, owned or not: a shared utility). Without `teams`,
only runs of schedules without an owner call it: what a deployment that sets no owners (open
ownership) always had, while a team's owned run never reaches a handler its author did not open
to it. A run naming a handler it may not call is dead-lettered with the reason at admission,
never run (`kairos.services.executor.admission`).

The handler returns to succeed and raises to fail (the exception's text is the reason). It runs
on a worker thread of the executor; a long handler should check `run.stop_requested` and return
when it is set (timeout, replaced by a newer run, lease lost, shutdown): a thread cannot be
killed, so the attempt's outcome waits for the handler and its lease is kept until then.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kairos.core.errors import KairosError
from kairos.core.ownership import TEAM_NAME
from kairos.streams.dedupe.base import AttemptTransaction, HandlerTransaction

_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,200}")


class HandlerRegistrationError(KairosError, ValueError):
    """A handler could not be registered; `name` is the handler name."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        self.problem = problem
        super().__init__(f"handler {name!r}: {problem}")


@dataclass
class RunContext:
    """What a handler knows about the attempt it runs."""

    run_id: str
    """The idempotency key of the run: the same for every attempt and every delivery."""
    schedule_id: str
    attempt: int
    """1 for the first attempt."""
    max_attempts: int
    nominal_at: datetime
    fired_at: datetime
    args: Mapping[str, Any]
    """The job's `args`, as the schedule gives them."""
    stop_requested: threading.Event
    """Set when the attempt must end early; a long handler returns (or raises) when it is."""
    _transaction: AttemptTransaction = field(repr=False)
    owner: str | None = None
    """The team that owns the run's schedule (`None`: a schedule without an owner); a handler
    registered for several teams tells their runs apart by it."""
    interval_start: datetime | None = None
    """Where the run's data interval, the period it is for, starts (docs/defaults.md); it ends
    at `nominal_at`. `None` for a run fired by a release older than schema history v12."""
    timezone: str = "UTC"
    """The schedule's zone, to read the interval on its clock."""

    def transaction(self) -> HandlerTransaction:
        """The dedupe store's database transaction for this attempt.

        Writes made in it commit atomically with the attempt's outcome: exactly when the attempt
        is recorded as succeeded, never when it fails, times out, or its lease was lost. Use it
        for effects in the same database; anything else a handler does is at least once, so key
        it by `run_id`.
        """
        return self._transaction.begin()


Handler = Callable[[RunContext], None]


class AnyTeam:
    """The `teams` of a handler every run may call (`ANY_TEAM`)."""

    def __repr__(self) -> str:
        return "ANY_TEAM"


ANY_TEAM = AnyTeam()
"""Register a handler with `teams=ANY_TEAM` to let every run call it, owned or not."""

Callers = frozenset[str] | AnyTeam
"""Whose runs may call a handler: these teams' (empty: only runs without an owner), or any."""


@dataclass(frozen=True, slots=True)
class _Registered:
    function: Handler
    callers: Callers


class Handlers:
    """A registry of named `python` job handlers, each with the teams whose runs may call it."""

    def __init__(self) -> None:
        self._handlers: dict[str, _Registered] = {}

    def handler(
        self, name: str | None = None, *, teams: Iterable[str] | AnyTeam = ()
    ) -> Callable[[Handler], Handler]:
        """Register the decorated function under `name` (by default, the function's name), for
        the runs of `teams` (see the module docstring)."""

        def register(function: Handler) -> Handler:
            self.add(name or function.__name__, function, teams=teams)
            return function

        return register

    def add(self, name: str, function: Handler, *, teams: Iterable[str] | AnyTeam = ()) -> None:
        if not _NAME.fullmatch(name):
            raise HandlerRegistrationError(name, "use 1–200 letters, digits and . _ : / -")
        if name in self._handlers:
            raise HandlerRegistrationError(name, "already registered; names must be unique")
        self._handlers[name] = _Registered(function, _callers(name, teams))

    def get(self, name: str) -> Handler | None:
        registered = self._handlers.get(name)
        return None if registered is None else registered.function

    def refusal(self, name: str, owner: str | None) -> str | None:
        """Why a run of `owner` (`None`: a schedule without one) may not call handler `name`
        registered here, or `None` when it may."""
        callers = self._handlers[name].callers
        if isinstance(callers, AnyTeam) or owner in callers or (owner is None and not callers):
            return None
        if owner is None:
            return (
                f"handler {name} is registered for teams {_listed(callers)}; a run "
                "without an owner may not call it: set the schedule's owner to one of them"
            )
        opened = "runs without an owner only" if not callers else f"teams {_listed(callers)}"
        return (
            f"handler {name} is registered for {opened}; team {owner} may not call it. To "
            f"let it, its executor registers it with teams={tuple(sorted(callers | {owner}))!r} "
            "or teams=ANY_TEAM"
        )

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._handlers)

    def callers(self, name: str) -> Callers:
        return self._handlers[name].callers

    @classmethod
    def combined(cls, registries: Iterable[Handlers]) -> Handlers:
        """One registry holding every handler of `registries` (names must not clash)."""
        merged = cls()
        for registry in registries:
            for name, registered in registry._handlers.items():
                merged.add(name, registered.function, teams=registered.callers)
        return merged


def _listed(teams: frozenset[str]) -> str:
    return ", ".join(sorted(teams))


def _callers(name: str, teams: Iterable[str] | AnyTeam) -> Callers:
    if isinstance(teams, AnyTeam):
        return teams
    if isinstance(teams, str):
        # A bare string iterates as its letters: teams="payments" would admit team "p".
        raise HandlerRegistrationError(
            name, f"teams={teams!r} is one string; write teams=({teams!r},)"
        )
    callers = frozenset(teams)
    bad = sorted(team for team in callers if not TEAM_NAME.fullmatch(team))
    if bad:
        raise HandlerRegistrationError(
            name,
            f"teams {bad} are not team names (lower-case letters, digits and inner hyphens); "
            "name the teams whose runs may call it, or teams=ANY_TEAM for every run",
        )
    return callers
