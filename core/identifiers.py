"""The one rule schedule and calendar ids follow, and the type that checks it."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

SCHEDULE_ID_PATTERN = re.compile(r"[A-Za-z0-9._:/-]{1,200}")

ID_RULE = "1–200 characters of letters, digits and . _ : / -"


def _valid_id(value: str) -> str:
    if not SCHEDULE_ID_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid id; use {ID_RULE}")
    return value


Identifier = Annotated[str, AfterValidator(_valid_id)]
"""A schedule's id, or a calendar's (they follow one rule): `SCHEDULE_ID_PATTERN`."""
