"""Calendar changes in a deployment that enforces ownership: the teams and keys they are judged by.

Every reader of the calendars topic (the tickers, the audit, `kairos calendars`) checks each
record's signature with a `SignedCalendars` made from the registered teams, then lets
`kairos.core.calendar_ownership.CalendarLedger` decide whether it counts: one verdict, whoever
reads. Its age limit is the calendars' own, not a ticker's `--signature-max-age-s`: the verdict
must not depend on which process reads the record, nor on its options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kairos.core.ownership import Team
from kairos.streams.wire.signing import Verifier

CALENDAR_SIGNATURE_MAX_AGE_MS = 300_000
"""How far a calendar change's signing may lie from when the broker appended it: the tickers'
default for schedule changes, fixed for calendars so that every reader agrees."""


@dataclass(frozen=True)
class SignedCalendars:
    """The registered teams, and the checker of signatures made with their keys."""

    teams: Mapping[str, Team]
    verifier: Verifier

    @classmethod
    def of(cls, teams: Mapping[str, Team]) -> SignedCalendars:
        keys = {name: team.public_keys for name, team in teams.items()}
        return cls(teams, Verifier(keys, CALENDAR_SIGNATURE_MAX_AGE_MS))
