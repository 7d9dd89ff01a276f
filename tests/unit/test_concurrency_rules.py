"""Which ready runs may start under concurrency limits (kairos.core.concurrency), case by case."""

from __future__ import annotations

import pytest

from kairos.core.concurrency import (
    Candidate,
    ConcurrencyGroupError,
    parse_group,
    run_groups,
    within_limits,
)

pytestmark = pytest.mark.unit


def test_a_run_counts_in_its_owners_group_and_one_group_per_label() -> None:
    assert run_groups("payments", {"warehouse": "eu", "tier": "gold"}) == (
        "owner:payments",
        "label:tier=gold",
        "label:warehouse=eu",
    )
    assert run_groups(None, {}) == ()


def test_runs_start_in_due_order_until_a_group_is_full_and_others_pass_it() -> None:
    candidates = [
        Candidate("p1", ("owner:payments",)),
        Candidate("p2", ("owner:payments",)),
        Candidate("g1", ("owner:growth",)),
        Candidate("p3", ("owner:payments",)),
        Candidate("g2", ("owner:growth", "label:db=eu")),
    ]
    started, full = within_limits(
        candidates, {"owner:payments": 1}, {"owner:payments": 2, "label:db=eu": 1}, room=10
    )
    assert started == ["p1", "g1", "g2"]
    assert full == {"owner:payments", "label:db=eu"}


def test_room_bounds_the_starts_and_a_full_group_from_the_start_starts_nothing() -> None:
    candidates = [Candidate(f"r{n}", ("owner:ops",)) for n in range(5)]
    assert within_limits(candidates, {}, {}, room=2) == (["r0", "r1"], set())
    assert within_limits(candidates, {"owner:ops": 3}, {"owner:ops": 3}, room=5) == (
        [],
        {"owner:ops"},
    )


@pytest.mark.parametrize("text", ["owner:payments", "label:warehouse=eu", "label:k=a=b"])
def test_groups_written_as_documented_are_taken(text: str) -> None:
    assert parse_group(text) == text


@pytest.mark.parametrize("text", ["payments", "owner:", "label:", "label:k", "label:=v"])
def test_other_groups_are_refused(text: str) -> None:
    with pytest.raises(ConcurrencyGroupError, match="owner:OWNER or label:KEY=VALUE"):
        parse_group(text)
