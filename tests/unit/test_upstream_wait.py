"""What a waiting run waits for (the ticker resolves it) and its fate (the executor judges it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch, Upstream, UpstreamTimeout
from kairos.core.upstream_wait import (
    Judgement,
    Resolution,
    Unreadable,
    UpstreamPeriod,
    Verdict,
    judge,
    resolve,
)

NEW_YORK = ZoneInfo("America/New_York")
D = datetime(2027, 3, 16, 6, 0, tzinfo=UTC)  # 02:00 in New York
SETTLE = Schedule.model_validate(
    {"id": "settle", "cron": "0 22 * * MON-FRI", "timezone": "America/New_York",
     "owner": "payments", "downstream_teams": ["ledger"]}
)  # fmt: skip
LATEST = Upstream(schedule="settle", match=PeriodMatch.LATEST_BEFORE)


def test_a_granted_upstream_resolves_to_its_latest_period_before_the_run() -> None:
    period = resolve("ledger", LATEST, SETTLE, (D, NEW_YORK))

    assert period == UpstreamPeriod(
        "settle",
        PeriodMatch.LATEST_BEFORE,
        Resolution.MATCHED,
        datetime(2027, 3, 16, 2, 0, tzinfo=UTC),
    )


def test_the_same_local_date_waits_for_the_days_last_period_even_later_that_day() -> None:
    same_day = Upstream(schedule="settle", match=PeriodMatch.SAME_LOCAL_DATE)

    period = resolve("ledger", same_day, SETTLE, (D, NEW_YORK))

    assert period.period_at == datetime(2027, 3, 17, 2, 0, tzinfo=UTC)  # 22:00 EDT on the 16th


def test_what_a_run_cannot_wait_for_is_refused_or_unmatched_with_the_reason() -> None:
    foreign = resolve("marketing", LATEST, SETTLE, (D, NEW_YORK))
    missing = resolve("ledger", LATEST, None, (D, NEW_YORK))
    unreadable = resolve("ledger", LATEST, Unreadable("broker down"), (D, NEW_YORK))
    same_instant = Upstream(schedule="settle", match=PeriodMatch.SAME_INSTANT)
    unmatched = resolve("ledger", same_instant, SETTLE, (D, NEW_YORK))

    assert foreign.resolution is Resolution.REFUSED and foreign.period_at is None
    assert foreign.reason == (
        "upstream schedule settle belongs to payments, which does not let marketing's schedules "
        "wait for it: its owner adds marketing to its downstream_teams"
    )
    assert missing.resolution is Resolution.REFUSED
    assert "settle does not exist (never created, or deleted)" in str(missing.reason)
    assert unreadable.resolution is Resolution.REFUSED and "broker down" in str(unreadable.reason)
    assert unmatched.resolution is Resolution.UNMATCHED
    assert "no period of upstream settle matches this run's (same_instant)" in str(unmatched.reason)


def _matched(at: datetime) -> UpstreamPeriod:
    return UpstreamPeriod("settle", PeriodMatch.LATEST_BEFORE, Resolution.MATCHED, at)


def test_a_run_is_released_once_every_period_succeeded_and_waits_until_then() -> None:
    until = D + timedelta(hours=6)
    first, second = _matched(D), _matched(D - timedelta(days=1))

    def verdict(*succeeded: bool, now: datetime = D) -> Verdict:
        periods = list(zip((first, second), succeeded, strict=True))
        return judge(periods, until, UpstreamTimeout.FAIL, now).verdict

    assert verdict(True, True) is Verdict.RELEASE
    assert verdict(True, False) is Verdict.WAIT
    assert verdict(True, False, now=until - timedelta(milliseconds=1)) is Verdict.WAIT
    assert verdict(True, False, now=until) is Verdict.FAIL


def test_at_the_end_of_the_wait_the_run_ends_as_its_timeout_says_naming_the_periods() -> None:
    until = D + timedelta(hours=6)

    ended = judge([(_matched(D), False)], until, UpstreamTimeout.SKIP, until)

    assert ended == Judgement(
        Verdict.SKIP,
        "waited until 2027-03-16T12:00:00Z (upstream_wait) for the upstream periods ending at "
        "settle at 2027-03-16T06:00:00Z, which had not succeeded",
    )


def test_a_refusal_ends_the_run_at_once_and_an_unmatched_period_skips_it() -> None:
    refused = UpstreamPeriod("a", PeriodMatch.LATEST_BEFORE, Resolution.REFUSED, reason="no")
    unmatched = UpstreamPeriod("b", PeriodMatch.SAME_INSTANT, Resolution.UNMATCHED, reason="none")
    until = D + timedelta(hours=1)

    assert judge([(refused, False)], until, UpstreamTimeout.FAIL, D) == Judgement(
        Verdict.FAIL, "no"
    )
    assert judge([(refused, False)], until, UpstreamTimeout.SKIP, D).verdict is Verdict.SKIP
    assert judge([(unmatched, False)], until, UpstreamTimeout.FAIL, D) == Judgement(
        Verdict.SKIP, "none"
    )
    assert judge([(_matched(D), True), (refused, False)], until, UpstreamTimeout.FAIL, D) == (
        Judgement(Verdict.FAIL, "no")
    )
