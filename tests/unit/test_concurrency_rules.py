"""Which ready runs may start, and in what order (kairos.core.concurrency), case by case."""

from __future__ import annotations

import pytest

from kairos.core.concurrency import (
    NO_OWNER,
    Candidate,
    ConcurrencyGroupError,
    Running,
    choose_starts,
    owner_cap,
    owner_of,
    parse_group,
    round_robin,
    run_groups,
)

pytestmark = pytest.mark.unit

NOTHING = Running({}, {})


def ready(run_id: str, owner: str, due: int, *groups: str) -> Candidate:
    return Candidate(run_id, owner, (f"owner:{owner}", *groups), (due, due))


def test_a_run_counts_in_its_owner_its_owners_label_groups_and_the_shared_ones() -> None:
    assert run_groups("payments", {"warehouse": "eu", "tier": "gold"}) == (
        "owner:payments",
        "label:payments/tier=gold",
        "label:payments/warehouse=eu",
        "shared:tier=gold",
        "shared:warehouse=eu",
    )
    assert run_groups(None, {"tier": "gold"}) == ("shared:tier=gold",)
    assert run_groups(None, {}) == ()


def test_an_owner_with_a_slash_cannot_pose_as_another_owner_with_a_slashed_label() -> None:
    assert run_groups("a/b", {"c": "d"})[1] == "label:a%2Fb/c=d"
    assert run_groups("a", {"b/c": "d"})[1] == "label:a/b/c=d"
    assert owner_of(run_groups("a/b", {"c": "d"})) == "a/b"
    assert owner_of(run_groups(None, {"c": "d"})) == NO_OWNER


def test_runs_start_in_turns_by_owner_until_a_group_is_full_and_others_pass_it() -> None:
    candidates = [
        ready("p1", "payments", 1),
        ready("p2", "payments", 2),
        ready("p3", "payments", 3),
        ready("g1", "growth", 4),
        ready("g2", "growth", 5, "shared:db=eu"),
    ]
    started, full = choose_starts(
        candidates,
        Running({"owner:payments": 1}, {"payments": 1}),
        {"owner:payments": 2, "shared:db=eu": 1},
        room=10,
        share=1.0,
    )
    assert started == ["p1", "g1", "g2"]
    assert full == {"owner:payments", "shared:db=eu"}


def test_a_small_team_behind_a_herd_takes_its_turn_in_the_first_round() -> None:
    herd = [ready(f"a{n}", "a", n) for n in range(1000)]
    small = [ready(f"b{n}", "b", 5000 + n) for n in range(3)]
    unowned = [ready("x0", NO_OWNER, 9000)]
    assert [c.run_id for c in round_robin(herd + small + unowned)][:8] == [
        "a0",
        "b0",
        "x0",
        "a1",
        "b1",
        "a2",
        "b2",
        "a3",
    ]


def test_an_owner_at_its_share_starts_nothing_while_another_can_start() -> None:
    herd = [ready(f"a{n}", "a", n) for n in range(10)]
    small = [ready(f"b{n}", "b", 100 + n) for n in range(3)]
    running = Running({}, {"a": 3})
    # The pool: 3 running and 2 places; a holds 3 of 5, more than half: b takes both.
    assert owner_cap(0.5, 3, 2) == 3
    assert choose_starts(herd + small, running, {}, room=2, share=0.5)[0] == ["b0", "b1"]
    # With the whole pool as a's share, turns alone decide: a's run was due first.
    assert choose_starts(herd + small, running, {}, room=2, share=1.0)[0] == ["a0", "b0"]


def test_an_owner_alone_or_facing_only_held_back_runs_is_not_capped() -> None:
    herd = [ready(f"a{n}", "a", n) for n in range(10)]
    assert choose_starts(herd, Running({}, {"a": 8}), {}, room=3, share=0.1)[0] == [
        "a0",
        "a1",
        "a2",
    ]
    held = [ready("b0", "b", 100, "shared:db=eu")]
    started, _ = choose_starts(
        herd + held, Running({"shared:db=eu": 1}, {"a": 8}), {"shared:db=eu": 1}, 2, 0.1
    )
    assert started == ["a0", "a1"]


def test_capped_owners_share_the_room_left_by_turns() -> None:
    candidates = [ready(f"a{n}", "a", n) for n in range(5)] + [
        ready(f"b{n}", "b", 10 + n) for n in range(5)
    ]
    started, _ = choose_starts(candidates, Running({}, {"a": 4, "b": 4}), {}, 4, 0.25)
    assert started == ["a0", "b0", "a1", "b1"]


def test_room_bounds_the_starts_and_a_full_group_from_the_start_starts_nothing() -> None:
    candidates = [ready(f"r{n}", "ops", n) for n in range(5)]
    assert choose_starts(candidates, NOTHING, {}, room=2, share=1.0) == (["r0", "r1"], set())
    assert choose_starts(
        candidates, Running({"owner:ops": 3}, {"ops": 3}), {"owner:ops": 3}, 5, 1.0
    ) == ([], {"owner:ops"})


@pytest.mark.parametrize(
    "text",
    [
        "owner:payments",
        "label:payments/warehouse=eu",
        "label:payments/k=a=b",
        "label:a%2Fb/k/x=v",
        "shared:warehouse=eu",
        "shared:app.io/tier=gold",
    ],
)
def test_groups_written_as_documented_are_taken(text: str) -> None:
    assert parse_group(text) == text


@pytest.mark.parametrize("text", ["payments", "owner:", "label:payments/k", "shared:=v"])
def test_other_groups_are_refused_with_how_to_write_them(text: str) -> None:
    with pytest.raises(ConcurrencyGroupError, match="owner:OWNER, label:OWNER/KEY=VALUE"):
        parse_group(text)


@pytest.mark.parametrize("text", ["label:warehouse=eu", "label:", "label:/k=v", "label:k=v/x"])
def test_a_label_group_without_its_owner_is_refused_naming_both_ways(text: str) -> None:
    with pytest.raises(ConcurrencyGroupError, match=r"name the owner.*shared:KEY=VALUE"):
        parse_group(text)
