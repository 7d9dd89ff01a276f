"""The due index of a ticker's partition store: which schedule is due when, kept in memory
(`kairos.streams.state.state_store` builds it from the due instants its progress values carry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sortedcontainers import SortedDict


class DueIndex:
    """Which schedule is due when, in time order: the memory copy of the store's due index.

    Schedules due at one instant are kept together, in the order they became due there: a herd
    is one entry of the sorted map, however many schedules it holds. An instant only one
    schedule is due at holds its id alone, not a one-entry dictionary: schedules spread by
    jitter or by their crons are mostly alone at their millisecond (a million every-minute
    schedules over twelve partitions: about 250,000 alone), and the dictionary cost 180 bytes.
    """

    def __init__(self) -> None:
        self._due_of: dict[str, int] = {}
        self.due_of: Callable[[str], int | None] = self._due_of.get
        """When a schedule is due (`None`: not due): the dictionary's own lookup, one C call
        (a fair herd asks it of every fire, `services/ticker/fairness.py`)."""
        self._at: SortedDict[int, str | dict[str, None]] = SortedDict()

    def __len__(self) -> int:
        return len(self._due_of)

    def move(self, schedule_id: str, due_ms: int | None) -> None:
        """Make `schedule_id` due at `due_ms` (`None`: not due at all)."""
        old = self._due_of.pop(schedule_id, None)
        if old is not None:
            self._leave(old, schedule_id)
        if due_ms is not None:
            self._due_of[schedule_id] = due_ms
            at_due = self._at.get(due_ms)
            if at_due is None:
                self._at[due_ms] = schedule_id
            elif isinstance(at_due, str):
                self._at[due_ms] = {at_due: None, schedule_id: None}
            else:
                at_due[schedule_id] = None

    def _leave(self, instant: int, schedule_id: str) -> None:
        bucket = self._at[instant]
        if isinstance(bucket, str):
            if bucket != schedule_id:  # as `del` raises for a dictionary: the two maps disagree
                raise KeyError(schedule_id)
            del self._at[instant]
            return
        del bucket[schedule_id]
        if len(bucket) == 1:
            self._at[instant] = next(iter(bucket))

    def count(self, from_ms: int, until_ms: int) -> int:
        """How many schedules are due in `[from_ms, until_ms]`."""
        return sum(
            1 if isinstance(bucket, str) else len(bucket)
            for bucket in map(self._at.__getitem__, self._at.irange(from_ms, until_ms))
        )

    def first(self) -> int | None:
        """The earliest due instant."""
        return self._at.peekitem(0)[0] if self._at else None

    def instants(self, from_ms: int, until_ms: int) -> Iterator[tuple[int, list[str]]]:
        """Each instant in `[from_ms, until_ms]`, oldest first, with the schedules due then.

        The lists are copies: the caller may move schedules while it walks them.
        """
        for instant in list(self._at.irange(from_ms, until_ms)):
            bucket = self._at.get(instant)
            if isinstance(bucket, str):
                yield instant, [bucket]
            elif bucket:
                yield instant, list(bucket)
