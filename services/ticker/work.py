"""What one firing transaction carries, accumulated before it is sent.

Nothing here touches Kafka or the store: the service fills a `TransactionWork`, sends it in one
transaction, and only after the commit writes the new states to the stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kairos.core.firing import Action, Decision, Outcome, ScheduleState
from kairos.services.ticker.partition import OwnedPartition


@dataclass
class TransactionWork:
    runs: list[tuple[Decision, ScheduleState, int]] = field(default_factory=list)
    """Each occurrence to fire, with the state that owed it and its schedules partition."""
    skips: list[Decision] = field(default_factory=list)
    dead_letters: list[bytes] = field(default_factory=list)
    states: dict[int, dict[str, ScheduleState | None]] = field(default_factory=dict)
    """The new state of each schedule touched, per partition (`None`: deleted)."""
    redefined: dict[int, set[str]] = field(default_factory=dict)
    """Schedules whose definition changed in this transaction (not only their progress)."""
    consumed: int = 0

    @property
    def decisions(self) -> int:
        return len(self.runs) + len(self.skips)

    @property
    def empty(self) -> bool:
        return not (self.decisions or self.dead_letters or self.states or self.consumed)

    def current(self, owned: OwnedPartition, schedule_id: str) -> ScheduleState | None:
        """The schedule's state including what this transaction already changed."""
        pending = self.states.get(owned.partition, {})
        if schedule_id in pending:
            return pending[schedule_id]
        return owned.state(schedule_id)

    def record(
        self,
        partition: int,
        schedule_id: str,
        outcome: Outcome,
        owed_by: ScheduleState | None,
        *,
        redefined: bool = False,
    ) -> None:
        """Take an outcome: its decisions (owed under `owed_by`) and the schedule's new state."""
        for decision in outcome.decisions:
            if decision.action is Action.FIRE:
                assert owed_by is not None, "only an existing schedule owes occurrences"
                self.runs.append((decision, owed_by, partition))
            else:
                self.skips.append(decision)
        self.states.setdefault(partition, {})[schedule_id] = outcome.state
        if redefined:
            self.redefined.setdefault(partition, set()).add(schedule_id)

    def changed_due_by(self, partition: int, now: datetime) -> list[ScheduleState]:
        """States changed in this transaction that are already due (a change takes effect now)."""
        return [
            state
            for state in self.states.get(partition, {}).values()
            if state is not None and state.due_at is not None and state.due_at <= now
        ]
