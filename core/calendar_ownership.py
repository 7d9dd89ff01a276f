"""Which calendar changes count: the one verdict every reader of the calendars topic applies.

Pure. The tickers, the audit's replay, `kairos calendars`, `kairos apply`'s and the preview's
calendar checks and the console (through the audit) all read the topic through one
`CalendarLedger`, record by record in topic order, so none holds a calendar another does not.

In a deployment that enforces ownership (`teams` given: the registered teams), a change counts
only when a registered team signed it (its signature checked before, with the calendars' own age
limit, `kairos.streams.readers.calendar_ownership`) and that team may make it;
docs/calendars.md states the rules for users:

- A calendar belongs to the team its first signed creation names as `owner`. Only that team or
  an administrators' team changes or deletes it; a team names only itself as the owner, so only
  an administrators' team hands a calendar to another team.
- An id outlives its calendar: once deleted, only its last owner or an administrators' team
  creates it again (while the delete is still on the topic).
- Deleting a calendar nobody holds changes nothing: it is taken, unsigned too.

Anything else is refused: the ledger keeps the calendars as they were and lists the refusal.
Without `teams` (open mode) every change counts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from kairos.core.business_calendar import BusinessCalendar
from kairos.core.calendar_versions import (
    KEPT_PROBLEMS,
    CalendarBook,
    CalendarChange,
    CalendarSignature,
    CalendarVersion,
    RefusedCalendarChange,
    SkippedCalendarRecord,
)
from kairos.core.ownership import Team


def calendar_refusal(
    signer: Team,
    calendar_id: str,
    held: BusinessCalendar | None,
    new: BusinessCalendar | None,
    last_owner: str | None,
) -> str | None:
    """Why `signer` may not make the change, or `None` when it may.

    `held` is the calendar in force (`None`: none), `new` the one the change sets (`None`: a
    delete), `last_owner` the owner of the id's last deleted calendar (`None`: none)."""
    if signer.admin:
        return None
    verb = "delete" if new is None else "change"
    if held is None and last_owner not in (None, signer.name):
        return (
            f"calendar id {calendar_id!r} was team {last_owner!r}'s until it was deleted: only "
            f"that team or an administrators' team may create it again; team {signer.name!r} "
            "may not (choose another id, or ask an administrator to hand it on)"
        )
    if held is not None and held.owner != signer.name:
        return (
            f"calendar {calendar_id!r} belongs to team {held.owner!r}; team {signer.name!r} may "
            f"not {verb} it (only its owner or an administrators' team may)"
        )
    if new is not None and new.owner != signer.name:
        return (
            f"calendar {calendar_id!r} names owner {new.owner!r} but team {signer.name!r} "
            f"signed it: a team publishes only its own calendars; set owner: {signer.name} (an "
            "administrators' team hands a calendar to another team)"
        )
    return None


class CalendarLedger:
    """The calendars in force as a topic's records are taken in order, and what was refused.

    Not thread-safe: one reader takes records. A ticker keeps one for as long as it follows the
    topic; every other reader makes one per read.
    """

    def __init__(self) -> None:
        self._versions: dict[str, CalendarVersion] = {}
        self._last_owners: dict[str, str] = {}
        self._skipped: deque[SkippedCalendarRecord] = deque(maxlen=KEPT_PROBLEMS)
        self._refused: deque[RefusedCalendarChange] = deque(maxlen=KEPT_PROBLEMS)
        self._skipped_count = 0
        self._refused_count = 0

    def take(
        self, record: CalendarChange | SkippedCalendarRecord, teams: Mapping[str, Team] | None
    ) -> CalendarChange | None:
        """Take the next record of the topic; the change when it counts (`None` when it breaks
        the contract or is refused). `teams`: the registered teams, or `None` in open mode."""
        if isinstance(record, SkippedCalendarRecord):
            self._skipped.append(record)
            self._skipped_count += 1
            return None
        held = self._versions.get(record.calendar_id)
        if teams is not None:
            reason, team = self._refusal(record, held, teams)
            if reason is not None:
                self._refused.append(
                    RefusedCalendarChange(
                        record.calendar_id, record.version, reason, team, record.changed_at
                    )
                )
                self._refused_count += 1
                return None
        version = record.in_force()
        if version is None:
            if held is not None:
                self._last_owners[record.calendar_id] = held.calendar.owner
            self._versions.pop(record.calendar_id, None)
            return record
        self._last_owners.pop(record.calendar_id, None)
        self._versions[record.calendar_id] = version
        return record

    def book(self) -> CalendarBook:
        """The calendars in force now, with the latest records skipped or refused so far."""
        return CalendarBook(
            dict(self._versions),
            tuple(self._skipped),
            tuple(self._refused),
            self._skipped_count,
            self._refused_count,
        )

    def _refusal(
        self, change: CalendarChange, held: CalendarVersion | None, teams: Mapping[str, Team]
    ) -> tuple[str | None, str | None]:
        if change.calendar is None and held is None:
            return None, None
        signature = change.signature or CalendarSignature(
            None, "its signature was not checked; read the calendars through a feed that checks"
        )
        if signature.refusal is not None:
            return signature.refusal, signature.team
        signer = None if signature.team is None else teams.get(signature.team)
        if signer is None:
            return f"signed as team {signature.team!r}, which is not registered", None
        reason = calendar_refusal(
            signer,
            change.calendar_id,
            None if held is None else held.calendar,
            change.calendar,
            self._last_owners.get(change.calendar_id),
        )
        return reason, signer.name
