"""What one firing transaction carries, accumulated before it is sent.

Nothing here touches Kafka or the store: the service fills a `TransactionWork`, sends it in one
transaction, and only after the commit writes the new states to the stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kairos.core.firing import Action, Decision, Outcome, ScheduleState
from kairos.core.quotas import NO_USE, Use
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.quotas import state_use
from kairos.streams.state.changelog import Floor
from kairos.streams.state.state_store import StateWrite


@dataclass
class TransactionWork:
    runs: list[tuple[Decision, ScheduleState, int]] = field(default_factory=list)
    """Each occurrence to fire, with the state that owed it and its schedules partition."""
    skips: list[tuple[Decision, str | None]] = field(default_factory=list)
    """Each occurrence skipped, with the owner of the definition that skipped it."""
    dead_letters: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    """(key, value) of each dead letter: keyed by the (bounded) key of the record it copies."""
    states: dict[int, dict[str, ScheduleState | None]] = field(default_factory=dict)
    """The new state of each schedule touched, per partition (`None`: deleted)."""
    redefined: dict[int, set[str]] = field(default_factory=dict)
    """Schedules whose definition changed in this transaction (not only their progress)."""
    written_ahead: dict[int, dict[str, StateWrite]] = field(default_factory=dict)
    """The state writes, prepared in idle time, of schedules whose new state was decided ahead."""
    floors: dict[int, dict[str, Floor]] = field(default_factory=dict)
    """Of each schedule deleted in this transaction that decided occurrences or had an owner:
    the floor its id keeps for a re-creation."""
    settle_room: int = 0
    """How many more occurrences changes may settle in this transaction (the catch-up budget)."""
    rerun_room: int = 0
    """How many more re-runs this transaction may fire (`Budgets.reruns`); below zero once the
    first request of a partition took more than was left."""
    reruns_taken: set[int] = field(default_factory=set)
    """Partitions that took a re-run request in this transaction."""
    held: set[int] = field(default_factory=set)
    """Partitions whose next change waits for its schedule's old definition to settle: nothing
    after it is taken in this transaction, and the consumer reads it again (see `settle`)."""
    ran_out: list[tuple[int, ScheduleState]] = field(default_factory=list)
    """(partition, state) of each schedule whose `max_runs`-th run this transaction fires."""
    failure_pauses: list[tuple[int, ScheduleState, str]] = field(default_factory=list)
    """(partition, state, reason) of each schedule this transaction pauses: its
    `pause_on_failure` was reached (`services/ticker/failure_pause.py`)."""
    restores: dict[tuple[int, bytes], tuple[bytes | None, int]] = field(default_factory=dict)
    """(partition, key) -> (value, refused offset) of each key to restore after a refused change
    (`services/ticker/ownership.py`): the held definition's event, or `None`, a tombstone."""
    use_changes: dict[int, dict[str, Use]] = field(default_factory=dict)
    """How this transaction's changes move each team's quota use, per partition."""
    recount_use: set[int] = field(default_factory=set)
    """Partitions whose quota use is counted again after the commit (a quarantine)."""
    consumed: int = 0
    quarantined: int = 0
    """Schedules removed from the state because they could not be decoded, decided or encoded."""

    @property
    def decisions(self) -> int:
        return len(self.runs) + len(self.skips)

    @property
    def empty(self) -> bool:
        return not (
            self.decisions
            or self.dead_letters
            or self.states
            or self.consumed
            or self.failure_pauses
        )

    def current(self, owned: OwnedPartition, schedule_id: str) -> ScheduleState | None:
        """The schedule's state including what this transaction already changed."""
        pending = self.states.get(owned.partition, {})
        if schedule_id in pending:
            return pending[schedule_id]
        return owned.state(schedule_id)

    def use_of(self, owned: OwnedPartition, team: str) -> Use:
        """The team's quota use of the partition, including this transaction's changes."""
        return owned.use.of(team) + self.use_changes.get(owned.partition, {}).get(team, NO_USE)

    def count_use(
        self, partition: int, before: ScheduleState | None, after: ScheduleState | None
    ) -> None:
        """Count a change of a schedule's definition from `before` to `after` against quotas."""
        changes = self.use_changes.setdefault(partition, {})
        left, taken = state_use(before), state_use(after)
        if left is not None:
            changes[left[0]] = changes.get(left[0], NO_USE) - left[1]
        if taken is not None:
            changes[taken[0]] = changes.get(taken[0], NO_USE) + taken[1]

    def floor(self, owned: OwnedPartition, schedule_id: str) -> Floor | None:
        """What a deleted schedule left of its id, including this transaction's deletes."""
        pending = self.floors.get(owned.partition, {})
        if schedule_id in pending:
            return pending[schedule_id]
        return owned.floor(schedule_id)

    def settle(
        self,
        owned: OwnedPartition,
        schedule_id: str,
        outcome: Outcome,
        owed_by: ScheduleState | None,
    ) -> bool:
        """Take the outcome of a change; `False` when it is held (`Outcome.settling`).

        A held change's partition takes nothing more in this transaction, so no later change
        of the partition is applied before it, and its settlement counts against `settle_room`.
        """
        self.settle_room -= len(outcome.decisions)
        self.record(owned.partition, schedule_id, outcome, owed_by, redefined=not outcome.settling)
        floors = self.floors.setdefault(owned.partition, {})
        floor = None
        if outcome.state is None:
            assert owed_by is not None, "only an existing schedule is deleted"
            floor = Floor(owed_by.version, outcome.floor, owed_by.schedule.owner)
        if floor is not None and floor.keeps_anything:
            floors[schedule_id] = floor
        else:
            floors.pop(schedule_id, None)
        if outcome.settling:
            self.held.add(owned.partition)
            return False
        return True

    def record(
        self,
        partition: int,
        schedule_id: str,
        outcome: Outcome,
        owed_by: ScheduleState | None,
        *,
        redefined: bool = False,
        written_ahead: StateWrite | None = None,
    ) -> None:
        """Take an outcome: its decisions (owed under `owed_by`) and the schedule's new state.

        `written_ahead` is the state write of an outcome decided ahead (see `Ahead`).
        """
        for decision in outcome.decisions:
            if decision.action is Action.FIRE:
                assert owed_by is not None, "only an existing schedule owes occurrences"
                self.runs.append((decision, owed_by, partition))
            else:
                owner = None if owed_by is None else owed_by.schedule.owner
                self.skips.append((decision, owner))
        state = outcome.state
        if state is not None and state.ran_out and owed_by is not None and not owed_by.ran_out:
            self.ran_out.append((partition, state))
        self.states.setdefault(partition, {})[schedule_id] = outcome.state
        if redefined:
            self.redefined.setdefault(partition, set()).add(schedule_id)
        if written_ahead is not None:
            self.written_ahead.setdefault(partition, {})[schedule_id] = written_ahead
        elif partition in self.written_ahead:
            # A later outcome in the same transaction replaces the one decided ahead.
            self.written_ahead[partition].pop(schedule_id, None)

    def forget(self, partition: int, schedule_id: str) -> None:
        """Drop everything this transaction holds of one schedule (it is being quarantined)."""
        self.runs = [
            run for run in self.runs if run[2] != partition or run[0].schedule_id != schedule_id
        ]
        self.ran_out = [
            (p, state)
            for p, state in self.ran_out
            if p != partition or state.schedule_id != schedule_id
        ]
        self.skips = [skip for skip in self.skips if skip[0].schedule_id != schedule_id]
        self.states.get(partition, {}).pop(schedule_id, None)
        self.written_ahead.get(partition, {}).pop(schedule_id, None)
        # Its deletion then encodes nothing it decided: the one write that cannot fail.
        self.floors.get(partition, {}).pop(schedule_id, None)

    def changed_due_by(self, partition: int, now: datetime) -> list[ScheduleState]:
        """States changed in this transaction that are already due (a change takes effect now)."""
        return [
            state
            for state in self.states.get(partition, {}).values()
            if state is not None and state.due_at is not None and state.due_at <= now
        ]
