"""Quota rules (`kairos.core.quotas`): what a schedule takes, each partition's share, verdicts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.quotas import (
    NO_USE,
    Quota,
    QuotaDefinitionError,
    Trigger,
    Use,
    partition_share,
    peak_fires_per_minute,
    quota_refusal,
    schedule_use,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("every", "peak"),
    [
        pytest.param(None, 1, id="cron-or-at"),
        pytest.param(timedelta(seconds=1), 60, id="every-second"),
        pytest.param(timedelta(seconds=7), 9, id="7s-fits-nine-in-a-minute"),
        pytest.param(timedelta(seconds=10), 6, id="10s"),
        pytest.param(timedelta(seconds=45), 2, id="45s-two-in-some-minute"),
        pytest.param(timedelta(seconds=59, milliseconds=999), 2, id="just-under-a-minute"),
        pytest.param(timedelta(minutes=1), 1, id="a-minute"),
        pytest.param(timedelta(hours=6), 1, id="hours"),
    ],
)
def test_a_schedule_counts_its_most_fires_in_any_minute(every: timedelta | None, peak: int) -> None:
    assert peak_fires_per_minute(Trigger(every)) == peak
    assert schedule_use(Trigger(every)) == Use(1, peak)


@given(st.integers(1, 3600 * 3), st.integers(0, 3600))
def test_the_peak_bounds_every_window_of_a_minute(every_s: int, window_start_s: int) -> None:
    # Fires at k * every; count those in [start, start + 60).
    start = window_start_s
    first = -(-start // every_s)
    in_window = len(range(first * every_s, start + 60, every_s))
    assert in_window <= peak_fires_per_minute(Trigger(timedelta(seconds=every_s)))


@pytest.mark.parametrize(
    ("limit", "partitions", "share"), [(0, 4, 0), (1, 12, 1), (1000, 12, 84), (24, 12, 2)]
)
def test_each_partition_holds_the_limit_over_the_partitions_rounded_up(
    limit: int, partitions: int, share: int
) -> None:
    assert partition_share(limit, partitions) == share


def test_a_change_over_the_partitions_share_is_refused_with_how_to_fix_it() -> None:
    quota = Quota(max_schedules=8)
    at_share = quota_refusal("growth", quota, Use(1, 1), Use(2, 2), partition=3, partitions=4)
    assert at_share is None
    reason = quota_refusal("growth", quota, Use(2, 2), Use(3, 3), partition=3, partitions=4)
    assert reason is not None
    for said in ("team 'growth', 8 schedules", "partition 3", "share of 2", "take 3"):
        assert said in reason
    assert "kairos teams quota growth" in reason and "set-quota" in reason


def test_fires_a_minute_are_judged_apart_from_schedules() -> None:
    quota = Quota(max_fires_per_minute=24)
    faster = quota_refusal("fast", quota, Use(1, 6), Use(1, 12), partition=0, partitions=4)
    assert faster is not None and "team 'fast', 24 fires a minute" in faster
    assert quota_refusal("fast", quota, Use(1, 6), Use(2, 6), partition=0, partitions=4) is None


def test_a_change_that_does_not_raise_use_is_taken_over_a_lowered_quota() -> None:
    lowered = Quota(max_schedules=4, max_fires_per_minute=4)
    assert quota_refusal("t", lowered, Use(9, 60), Use(8, 54), partition=0, partitions=4) is None
    assert quota_refusal("t", lowered, Use(9, 60), Use(9, 60), partition=0, partitions=4) is None
    assert quota_refusal("t", lowered, Use(9, 60), Use(9, 61), partition=0, partitions=4)


def test_a_zero_quota_freezes_a_team_and_a_negative_one_is_refused() -> None:
    frozen = Quota(max_schedules=0)
    assert quota_refusal("t", frozen, NO_USE, Use(1, 1), partition=0, partitions=4)
    for wrong in (-1, 2**31):
        with pytest.raises(QuotaDefinitionError, match=r"from 0 to 2147483647, or none"):
            Quota(max_fires_per_minute=wrong)


@settings(max_examples=200)
@given(
    st.integers(1, 40),
    st.integers(1, 8),
    st.lists(st.tuples(st.integers(0, 7), st.booleans()), max_size=120),
)
def test_a_team_never_holds_more_than_its_limit_rounded_up_to_the_partitions(
    limit: int, partitions: int, changes: list[tuple[int, bool]]
) -> None:
    """Creations and deletions in any order, each judged on its partition alone."""
    quota = Quota(max_schedules=limit)
    held = [0] * partitions
    for target, create in changes:
        partition = target % partitions
        if not create:
            held[partition] = max(0, held[partition] - 1)
            continue
        used = Use(held[partition], held[partition])
        after = used + schedule_use(Trigger())
        refused = quota_refusal("t", quota, used, after, partition=partition, partitions=partitions)
        if refused is None:
            held[partition] += 1
    assert max(held) <= partition_share(limit, partitions)
    assert sum(held) <= partitions * partition_share(limit, partitions) < limit + partitions
