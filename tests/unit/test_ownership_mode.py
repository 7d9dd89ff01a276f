"""One ownership mode per deployment, carried in the committed offsets' metadata (H6), pure."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from kairos.streams.kafka.ownership import (
    NOT_JUDGED,
    Judged,
    Ownership,
    OwnershipInfo,
    judged_from,
    mode_refusal,
)

pytestmark = pytest.mark.unit

SIGNED, OPEN = Ownership.SIGNED, Ownership.OPEN
INFO = OwnershipInfo("t1", "host-a", datetime(2027, 1, 1, tzinfo=UTC), 3, None, None, 10)


def test_the_mode_and_where_it_began_travel_in_the_metadata() -> None:
    signed = replace(INFO, mode=SIGNED, mode_since=40)
    assert OwnershipInfo.decode(signed.encode()) == signed
    assert json.loads(signed.encode())["mode"] == "signed"
    # Metadata written before the mode was recorded still decodes, without one.
    older = {k: v for k, v in json.loads(signed.encode()).items() if not k.startswith("mode")}
    assert OwnershipInfo.decode(json.dumps(older)) == INFO


def test_a_ticker_refuses_a_partition_last_committed_in_another_mode() -> None:
    reason = mode_refusal(3, replace(INFO, mode=SIGNED), OPEN, None)
    assert reason is not None and "\n" not in reason
    assert "partition 3 was last committed in ownership mode 'signed' (by ticker 't1')" in reason
    assert "--ownership signed" in reason and "--ownership-from signed" in reason
    assert mode_refusal(3, replace(INFO, mode=OPEN), SIGNED, None) is not None


def test_a_partition_never_committed_or_committed_without_a_mode_or_in_its_mode_is_taken() -> None:
    assert mode_refusal(0, None, SIGNED, None) is None
    assert mode_refusal(0, INFO, SIGNED, None) is None  # an upgrade: taken once, then recorded
    assert mode_refusal(0, replace(INFO, mode=SIGNED), SIGNED, None) is None
    # A deployment switching modes takes over what was committed in the one it leaves.
    assert mode_refusal(0, replace(INFO, mode=OPEN), SIGNED, OPEN) is None


def test_the_mode_began_where_the_first_owner_in_it_started() -> None:
    assert judged_from(replace(INFO, mode=SIGNED, mode_since=40), SIGNED, 95) == 40
    assert judged_from(replace(INFO, mode=OPEN, mode_since=40), SIGNED, 95) == 95
    assert judged_from(INFO, SIGNED, 95) == 95
    assert judged_from(None, SIGNED, 0) == 0


def test_a_changes_signing_team_is_shown_only_where_a_signed_ticker_took_it() -> None:
    judged = Judged(committed_offset=100, mode=SIGNED, mode_since=40)
    assert judged.verified_team(60, "payments") == "payments"
    assert judged.verified_team(60, None) is None  # taken unsigned
    assert judged.verified_team(39, "payments") is None  # judged before the mode began
    assert judged.verified_team(100, "payments") is None  # not judged yet
    assert Judged(100, OPEN, 40).verified_team(60, "payments") is None
    assert Judged.of(100, replace(INFO, mode=SIGNED, mode_since=0)).verified_team(5, "g") == "g"
    assert Judged.of(100, INFO).verified_team(5, "growth") is None
    assert NOT_JUDGED.verified_team(0, "growth") is None
