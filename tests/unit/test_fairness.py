"""Fair herds: the order a herd larger than a transaction fires in (services/ticker/fairness.py)."""

from __future__ import annotations

from kairos.services.ticker.fairness import fair_order, merged_by_rank, ranked_due

OWNERS = {"b1": "bulk", "b2": "bulk", "b3": "bulk", "s1": "small", "t1": "tiny", "u1": None}


def test_an_instant_is_ordered_by_rank_within_owner_keeping_index_order_on_ties() -> None:
    order = fair_order(["b1", "b2", "s1", "b3", "t1", "u1"], OWNERS.get)
    assert order.ranked == [(0, "b1"), (0, "s1"), (0, "t1"), (0, "u1"), (1, "b2"), (2, "b3")]
    assert order.top == 3


def test_what_left_is_skipped_what_joined_follows_and_older_instants_go_first() -> None:
    order = fair_order(["b1", "b2", "s1"], OWNERS.get)
    due = {"b1": 10, "s1": 10, "t1": 10, "x": 5, "y": 5}  # b2 fired already; t1 joined
    instants = [(5, ["x", "y"]), (10, ["b1", "s1", "t1"])]
    ranked = list(ranked_due(instants, {10: order}, due.get, 7))
    assert ranked == [(0, 7, "x"), (1, 7, "y"), (2, 7, "b1"), (2, 7, "s1"), (4, 7, "t1")]


def test_partitions_merge_by_rank_so_every_owners_first_fire_leads() -> None:
    first = iter([(0, 0, "b1"), (1, 0, "b2"), (2, 0, "b3")])
    second = iter([(0, 1, "s1"), (0, 1, "t1"), (1, 1, "b4")])
    merged = list(merged_by_rank(["p0", "p1"], [first, second]))
    assert merged[:3] == [("p0", "b1"), ("p1", "s1"), ("p1", "t1")]
    assert [sid for _, sid in merged[3:]] == ["b2", "b4", "b3"]
