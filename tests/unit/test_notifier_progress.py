"""What the notifier may commit, and whose turn it is on a route: at least once, per route."""

from __future__ import annotations

from datetime import UTC, datetime

from kairos.core.notifications import Notice, Route, Topic
from kairos.services.notifier.progress import Delivery, Lanes, Pending, Source

NOTICE = Notice("run/x/dead_lettered/1", "payments", Topic.FAILED, "x", "x@1",
                datetime(2027, 3, 14, tzinfo=UTC), "x failed", {})  # fmt: skip


def source(offset: int) -> Source:
    return Source("events", 0, offset, None, None)


def test_an_offset_is_committed_only_once_every_route_is_done() -> None:
    pending = Pending()
    pending.read(source(4), set())
    pending.read(source(5), {"hook", "mail"})
    pending.read(source(6), set())
    assert [tp.offset for tp in pending.committable()] == [5]
    pending.done(source(5), "hook")
    assert [tp.offset for tp in pending.committable()] == [5]
    pending.done(source(5), "mail")
    assert [tp.offset for tp in pending.committable()] == [7]


def test_a_delivery_from_before_a_revoke_ends_only_its_own_route() -> None:
    pending = Pending()
    pending.read(source(5), {"a", "b"})
    pending.forget([("events", 0)])  # revoked, then assigned again and read anew
    pending.read(source(5), {"a", "b"})
    pending.done(source(5), "a")  # the old delivery of a ends
    pending.done(source(5), "a")  # and the new one
    assert [tp.offset for tp in pending.committable()] == [5], "b is still owed"
    assert pending.owes(source(5), "b") and not pending.owes(source(5), "a")


def test_a_route_serves_its_own_turns_and_hands_its_place_on() -> None:
    route = Route(name="hook", email=("a@b.example",))
    lanes = Lanes(per_route=1)
    first, second = (Delivery(NOTICE, route, source(n)) for n in (1, 2))
    assert lanes.enter(first) and not lanes.enter(second)
    assert lanes.leave(first) is second, "the next waiting takes the place"
    assert lanes.leave(second) is None
    assert lanes.enter(Delivery(NOTICE, route, source(3))), "the place is free again"
