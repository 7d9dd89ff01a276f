"""`python` jobs: handlers a team registers in its own executor process.

    handlers = Handlers()

    @handlers.handler("record-settlement")
    def record_settlement(run: RunContext) -> None:
        db = run.transaction()          # the dedupe store's transaction: effectively once
        db.execute("INSERT INTO settlements (run_id, day) VALUES (%s, %s)",
                   (run.run_id, run.args["day"]))

A schedule runs it with `{"kind": "python", "handler": "record-settlement", "args": {…}}`. The
handler returns to succeed and raises to fail (the exception's text is the reason). It runs on a
worker thread of the executor; a long handler should check `run.stop_requested` and return when
it is set (timeout, replaced by a newer run, lease lost, shutdown): a thread cannot be killed, so
the attempt's outcome waits for the handler and its lease is kept until then.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kairos.core.errors import KairosError
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

    def transaction(self) -> HandlerTransaction:
        """The dedupe store's database transaction for this attempt.

        Writes made in it commit atomically with the attempt's outcome: exactly when the attempt
        is recorded as succeeded, never when it fails, times out, or its lease was lost. Use it
        for effects in the same database; anything else a handler does is at least once, so key
        it by `run_id`.
        """
        return self._transaction.begin()


Handler = Callable[[RunContext], None]


class Handlers:
    """A registry of named `python` job handlers."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(self, name: str | None = None) -> Callable[[Handler], Handler]:
        """Register the decorated function under `name` (by default, the function's name)."""

        def register(function: Handler) -> Handler:
            self.add(name or function.__name__, function)
            return function

        return register

    def add(self, name: str, function: Handler) -> None:
        if not _NAME.fullmatch(name):
            raise HandlerRegistrationError(name, "use 1–200 letters, digits and . _ : / -")
        if name in self._handlers:
            raise HandlerRegistrationError(name, "already registered; names must be unique")
        self._handlers[name] = function

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._handlers)

    @classmethod
    def combined(cls, registries: Iterable[Handlers]) -> Handlers:
        """One registry holding every handler of `registries` (names must not clash)."""
        merged = cls()
        for registry in registries:
            for name, function in registry._handlers.items():
                merged.add(name, function)
        return merged
