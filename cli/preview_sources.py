"""Where `kairos preview` gets its schedules: a schedules file, or the published schedules topic.

The published ones are read as `kairos schedules list|get` read them (`ScheduleReader`): the
latest change of each id, so a deleted schedule is gone, and records that break the contract are
skipped with a warning, as the ticker skips them.
"""

from __future__ import annotations

import typer

from kairos.cli.options import fail, kafka_settings
from kairos.cli.reading import warn_rejected
from kairos.cli.schedule_files import SourcesInvalidError, fail_invalid, load_sources
from kairos.core.errors import KairosError
from kairos.core.schedule import Schedule
from kairos.streams.readers.held_schedules import StoredSchedule
from kairos.streams.readers.schedule_reader import ScheduleReader

READ_TIMEOUT_S = 300.0
"""How long reading the schedules topic to its end may take. Decoding and validating is about
4,000 definitions a second on one core (100,000 took 23 s, docs/operations.md), so the reader's
default 30 s would refuse a large deployment's histogram on a busy machine. A broker that does not
answer is still refused within `--timeout`, before the read starts."""


class PreviewInputError(KairosError):
    """The preview's own input (the file, `--from`, `--horizon`) is unusable."""


def file_schedules(file: str) -> list[Schedule]:
    """The schedules of a file (`-`: stdin), read and checked as `kairos apply` reads them, job
    parameters included; an invalid file prints each problem and cannot be previewed."""
    try:
        return [one.schedule for one in load_sources([file], owner=None)]
    except SourcesInvalidError as invalid:
        raise fail_invalid(invalid.invalid) from None


def published_schedules(
    context: typer.Context, ids: list[str], owner: str | None
) -> list[Schedule]:
    """The published schedules named by `ids` (in that order), then `owner`'s (by id).

    Cannot run when the topic lacks an id (every one is named), or holds none of the owner's.
    """
    reader = ScheduleReader(kafka_settings(context), timeout_s=READ_TIMEOUT_S)
    try:
        if owner is None and len(ids) == 1:
            # One id: only the partition it lives on is read, as `schedules get` does.
            stored = reader.read_one(ids[0])
            current = {} if stored is None else {stored.id: stored}
        else:
            snapshot = reader.read_all()
            warn_rejected(snapshot, reader)
            current = snapshot.schedules
    except KairosError as error:
        raise fail(str(error)) from None
    return _select(current, ids, owner, reader.topic)


def _select(
    current: dict[str, StoredSchedule], ids: list[str], owner: str | None, topic: str
) -> list[Schedule]:
    unknown = [schedule_id for schedule_id in ids if schedule_id not in current]
    if unknown:
        named = ", ".join(repr(schedule_id) for schedule_id in unknown)
        raise fail(
            f"no schedule {named} on {topic} (never published, or deleted); "
            "`kairos schedules list` shows the published ones"
        )
    chosen = dict.fromkeys(ids)
    if owner is not None:
        owned = sorted(s.id for s in current.values() if s.schedule.owner == owner)
        if not owned:
            raise fail(
                f"no schedule on {topic} has owner {owner!r}; "
                "`kairos schedules list` shows each schedule's owner"
            )
        chosen.update(dict.fromkeys(owned))
    return [current[schedule_id].schedule for schedule_id in chosen]
