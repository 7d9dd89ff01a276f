"""Which zone names a schedule may use, and which deserve a warning.

A schedule's wall clock must be the same on every host that reads it: the producer that
validated it, every ticker that fires it, the audit that checks it. So a zone is one of the IANA
zones (`zoneinfo.available_timezones()`), and the names in that list that do not name a clock
(`localtime`, `posixrules`: whatever the host is set to; `Factory`: tzdata's "no zone set") are
refused. Paths into the zone database (`posix/UTC`, `right/UTC`, the latter counting leap
seconds) load with `ZoneInfo` but are not in the list, so they are refused too.

`EST`, `MST` and `HST` are legacy fixed offsets with no daylight-saving time: valid, but most
people who write `EST` mean New York's clock, which is EST only half the year. The tools warn.
"""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from kairos.core.suggestions import did_you_mean

_EXAMPLES = "'UTC', 'Europe/Berlin' or 'America/New_York'"

HOST_ZONE_NAMES = {
    "localtime": "means the zone of whichever host reads the schedule",
    "posixrules": "means the default DST rules of whichever host reads the schedule",
    "Factory": "is tzdata's placeholder for a host whose zone was never set",
}
"""Names `zoneinfo` may load that do not name one wall clock, with why."""

LEGACY_FIXED_ZONES = {
    "EST": ("UTC-05:00", "America/New_York (with DST) or America/Panama (UTC-05:00 all year)"),
    "MST": ("UTC-07:00", "America/Denver (with DST) or America/Phoenix (UTC-07:00 all year)"),
    "HST": ("UTC-10:00", "Pacific/Honolulu"),
}
"""Legacy zone names with one offset and no DST: (the offset, the location zones to use)."""


@lru_cache(maxsize=1)
def _iana_zones() -> frozenset[str]:
    # Scanning the zone database takes tens of milliseconds; a restore validates a million
    # schedules, so the list is read once per process.
    return frozenset(available_timezones())


def zone_problem(name: str) -> str | None:
    """Why `name` cannot be a schedule's `timezone` (and what to write instead), or `None`."""
    if name in HOST_ZONE_NAMES:
        return (
            f"{name!r} {HOST_ZONE_NAMES[name]}, so hosts would disagree on when the "
            f"schedule fires; name the zone, such as {_EXAMPLES}"
        )
    if name not in _iana_zones():
        # Offered only here, on the error path: comparing with ~600 names takes milliseconds.
        return (
            f"{name!r} is not a known IANA time zone; use a name such as {_EXAMPLES}"
            f"{did_you_mean(name, _iana_zones())}"
        )
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        return f"{name!r} cannot be loaded from this host's zone database ({error})"
    return None


def legacy_fixed_zone_warning(name: str) -> str | None:
    """A warning for a legacy fixed-offset zone such as `EST`, or `None` for any other zone."""
    if name not in LEGACY_FIXED_ZONES:
        return None
    offset, instead = LEGACY_FIXED_ZONES[name]
    return (
        f"timezone {name!r} is a fixed {offset} offset with no daylight-saving time; "
        f"if the schedule follows a place's clock, use {instead}"
    )
