"""Which team may make which change: kairos.core.ownership's rules, pure."""

from __future__ import annotations

import pytest

from kairos.core.ownership import Change, Held, Team, TeamDefinitionError, refusal, upsert_change

KEY = bytes(32)
PAYMENTS = Team("payments", (KEY,))
GROWTH = Team("growth", (KEY,))
OPS = Team("ops", (KEY,), admin=True)
OWNED = Held("payments", paused=False)


def test_a_team_changes_what_it_owns_and_creates_under_its_own_name() -> None:
    assert refusal(PAYMENTS, "s", Change.CREATE, None, "payments") is None
    for change in (Change.OVERWRITE, Change.PAUSE, Change.RESUME):
        assert refusal(PAYMENTS, "s", change, OWNED, "payments") is None
    for change in (Change.DELETE, Change.TOMBSTONE, Change.RERUN):
        assert refusal(PAYMENTS, "s", change, OWNED, None) is None


@pytest.mark.parametrize("change", list(Change))
def test_no_team_changes_another_teams_schedule(change: Change) -> None:
    reason = refusal(GROWTH, "s", change, OWNED, "payments")
    assert reason is not None
    assert "belongs to team 'payments'" in reason and f"may not {change} it" in reason


def test_a_team_may_not_create_or_give_away_under_another_name() -> None:
    created = refusal(GROWTH, "s", Change.CREATE, None, "payments")
    assert created is not None and "set owner: growth" in created
    given = refusal(PAYMENTS, "s", Change.OVERWRITE, OWNED, "growth")
    assert given is not None and "names owner 'growth'" in given
    unowned = refusal(PAYMENTS, "s", Change.CREATE, None, None)
    assert unowned is not None and "names no owner" in unowned


def test_a_schedule_without_owner_is_only_an_administrators() -> None:
    legacy = Held(None, paused=False)
    reason = refusal(PAYMENTS, "s", Change.OVERWRITE, legacy, "payments")
    assert reason is not None and "has no owner" in reason
    assert refusal(OPS, "s", Change.OVERWRITE, legacy, "payments") is None
    assert refusal(OPS, "s", Change.TOMBSTONE, OWNED, None) is None


def test_a_deleted_id_stays_its_last_owners_until_an_administrator_hands_it_on() -> None:
    taken = refusal(GROWTH, "s", Change.CREATE, None, "growth", last_owner="payments")
    assert taken is not None
    assert "was team 'payments''s until it was deleted or quarantined" in taken
    assert "team 'growth' may not create it" in taken
    # Its last owner creates it again, and an administrators' team creates it for anyone.
    assert refusal(PAYMENTS, "s", Change.CREATE, None, "payments", last_owner="payments") is None
    assert refusal(OPS, "s", Change.CREATE, None, "growth", last_owner="payments") is None
    # An id deleted without an owner (or before owners were kept) is any team's to create.
    assert refusal(GROWTH, "s", Change.CREATE, None, "growth", last_owner=None) is None
    # Deleting an id nobody holds changes nothing, whoever it was.
    for change in (Change.DELETE, Change.TOMBSTONE):
        assert refusal(GROWTH, "s", change, None, None, last_owner="payments") is None


def test_what_a_definition_does_depends_on_what_is_held() -> None:
    assert upsert_change(None, paused=True) is Change.CREATE
    assert upsert_change(OWNED, paused=True) is Change.PAUSE
    assert upsert_change(Held("payments", paused=True), paused=False) is Change.RESUME
    assert upsert_change(OWNED, paused=False) is Change.OVERWRITE


@pytest.mark.parametrize(
    ("name", "keys", "problem"),
    [
        ("Payments", (KEY,), "lower-case"),
        ("-payments", (KEY,), "lower-case"),
        ("a" * 64, (KEY,), "at most 63"),
        ("payments", (), "no public key"),
        ("payments", (b"short",), "32 raw bytes"),
    ],
)
def test_a_team_registration_says_what_is_wrong(
    name: str, keys: tuple[bytes, ...], problem: str
) -> None:
    with pytest.raises(TeamDefinitionError, match=problem):
        Team(name, keys)
