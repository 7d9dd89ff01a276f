"""One definition object for the schedules that differ only by their id.

A ticker keeps every schedule due within minutes decoded. Schedules made from one template
differ only by their id, yet each held its own copy of the 31-field pydantic `Schedule`:
1.2 KB a schedule, most of the memory of a million every-minute schedules. A held state keeps
its id apart (`ScheduleState.schedule_id`) and its definition as the one object this module
hands out for that definition, with the id `ANONYMOUS_ID`, so that a path still reading the
definition's id reads a value no schedule can have rather than another schedule's.
"""

from __future__ import annotations

from kairos.core.lru import LruCache
from kairos.core.schedule import Schedule

ANONYMOUS_ID = ""
"""The id of a shared definition: no schedule id matches it (`SCHEDULE_ID_PATTERN`)."""

_SHARED: LruCache[tuple[object, ...], Schedule] = LruCache(16_384)
"""Asked by the thread that builds states (a ticker's main loop, the audit): its keys hold
pydantic models, whose hashing is Python code, unlike the keys `LruCache` is made for."""


def shared_definition(schedule: Schedule) -> Schedule:
    """`schedule` under `ANONYMOUS_ID`: one object for every schedule equal to it but for the
    id, as long as it is among the last 16,384 definitions shared."""
    if schedule.id == ANONYMOUS_ID:
        return schedule
    key = _definition_key(schedule)
    shared = _SHARED.get(key)
    if shared is None:
        shared = _SHARED.put(key, schedule.model_copy(update={"id": ANONYMOUS_ID}))
    return shared


def _definition_key(schedule: Schedule) -> tuple[object, ...]:
    # Every field but the id, in the model's order. Validated fields compare equal only when
    # they mean the same (instants are UTC, policies enums); `labels` is the one dict, and the
    # job's hash leaves out its parameters, which its equality compares.
    return tuple(
        tuple(value.items()) if isinstance(value, dict) else value
        for name, value in schedule.__dict__.items()
        if name != "id"
    )
