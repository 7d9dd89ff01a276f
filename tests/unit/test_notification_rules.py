"""What a team is told, and what a receiver's answer means: the notifier's pure rules."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.notifications import (
    Answer,
    RoutesFileError,
    Topic,
    judge_status,
    parse_routes,
    retry_delay,
    wanted,
)
from kairos.services.notifier.notices import dead_letter_notice, run_event_notice
from kairos.streams.wire.dead_letters import NOTIFICATION_FAILED

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def event(
    kind: str, owner: str | None = "payments", late_s: int = 0, attempt: int = 2
) -> dict[str, object]:
    return {"run_id": "payments.x@1", "schedule_id": "payments.x", "kind": kind, "attempt": attempt,
            "executor_instance": "e1", "nominal_at": T0, "fired_at": T0,
            "started_at": T0 + timedelta(seconds=late_s), "finished_at": None,
            "reason": "exit status 1", "next_attempt_at": None, "owner": owner}  # fmt: skip


def test_a_run_is_told_to_the_team_the_ticker_fired_it_for_and_to_no_one_without_one() -> None:
    notice = run_event_notice(event("dead_lettered"))
    assert notice is not None and (notice.team, notice.topic) == ("payments", Topic.FAILED)
    assert notice.notice_id == "run/payments.x@1/dead_lettered/2", "stable: the idempotency key"
    assert run_event_notice(event("dead_lettered", owner=None)) is None
    assert run_event_notice(event("succeeded")) is None


def test_a_late_start_is_told_only_to_routes_whose_threshold_it_passes() -> None:
    (route,) = parse_routes(
        {
            "teams": {
                "payments": [
                    {"name": "m", "email": ["a@b.example"], "about": ["late"], "late_after": "5m"}
                ]
            }
        },
        "f",
    ).by_team["payments"]
    on_time, late = (
        run_event_notice(event("started", late_s=299, attempt=1)),
        run_event_notice(event("started", late_s=301, attempt=1)),
    )
    assert on_time is not None and late is not None
    assert (wanted(route, on_time), wanted(route, late)) == (False, True)
    failed = run_event_notice(event("dead_lettered"))
    assert failed is not None and not wanted(route, failed), "only what the route asked about"
    retry = run_event_notice(event("started", late_s=900, attempt=2))
    assert retry is None, "a retry starts as late as its backoff made it: not told"


def test_refusals_are_told_to_the_team_reported_to_but_the_notifiers_own_letters_are_not() -> None:
    letter = {"source_topic": "s", "source_partition": 0, "source_offset": 7, "key": b"x",
              "reason": "belongs to team 'payments'", "error_class": "OwnershipRefusedError",
              "dead_lettered_at": T0, "reported_to": "growth"}  # fmt: skip
    notice = dead_letter_notice(letter)
    assert notice is not None and (notice.team, notice.topic) == ("growth", Topic.REFUSED)
    assert dead_letter_notice({**letter, "error_class": NOTIFICATION_FAILED}) is None
    assert dead_letter_notice({**letter, "reported_to": None}) is None


@pytest.mark.parametrize(
    ("route", "problem"),
    [
        ({"name": "a"}, "name exactly one of webhook, slack, email"),
        ({"name": "a", "webhook": "https://x.example"}, "a webhook needs secret_file"),
        ({"name": "a", "slack": "ftp://x"}, "is not an http:// or https:// URL"),
        ({"name": "a", "slack": "http://h:abc/x"}, "with a host and port"),
        ({"name": "a", "slack": "http://[::1/x"}, "with a host and port"),
        ({"name": "a", "email": ["nobody"]}, "not an email address"),
        ({"name": "a", "email": ["a@b.example"], "about": ["late"]}, "late_after go together"),
        ({"name": "a", "email": ["a@b.example"], "about": ["everything"]}, "about"),
    ],
)
def test_a_malformed_route_is_left_out_and_named_while_the_others_stay(
    route: dict[str, object], problem: str
) -> None:
    good = {"name": "mail", "email": ["a@b.example"]}
    parsed = parse_routes({"teams": {"payments": [route, good], "growth": [good]}}, "routes.yaml")
    assert [r.name for r in parsed.by_team["payments"]] == ["mail"]
    assert [r.name for r in parsed.by_team["growth"]] == ["mail"]
    (found,) = parsed.problems
    assert (found.team, found.position) == ("payments", 1) and problem in found.reason
    assert found.shown("routes.yaml").startswith("routes.yaml: team payments, route 1: ")


def test_a_routes_file_of_the_wrong_shape_is_refused_whole() -> None:
    twice = [{"name": "a", "email": ["a@b.example"]}] * 2
    assert "route 'a' twice" in parse_routes({"teams": {"p": twice}}, "f").problems[0].reason
    with pytest.raises(RoutesFileError, match="not a team name"):
        parse_routes({"teams": {"Pay Ments": []}}, "f")
    with pytest.raises(RoutesFileError, match="write one key, `teams:`"):
        parse_routes({"team": {}}, "f")
    with pytest.raises(RoutesFileError, match="write a list of routes"):
        parse_routes({"teams": {"payments": {"name": "a"}}}, "f")


@pytest.mark.parametrize(
    ("status", "answer"),
    [(200, Answer.DELIVERED), (204, Answer.DELIVERED), (302, Answer.GIVE_UP),
     (404, Answer.GIVE_UP), (408, Answer.RETRY), (429, Answer.RETRY), (503, Answer.RETRY)],
)  # fmt: skip
def test_a_receivers_answer_is_delivered_retried_or_given_up(status: int, answer: Answer) -> None:
    assert judge_status(status, "https://elsewhere.example/")[0] is answer
    if status == 302:
        assert "point the route at the final URL" in judge_status(status, None)[1]


def test_retries_wait_longer_each_time_capped_with_jitter_in_the_upper_half() -> None:
    rng = random.Random(7)
    first, longest = timedelta(seconds=2), timedelta(seconds=30)
    for retry, ceiling in ((1, 2), (2, 4), (3, 8), (5, 30), (9, 30)):
        waits = {retry_delay(retry, first, longest, rng).total_seconds() for _ in range(50)}
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits), (retry, waits)
        assert len(waits) > 1, "jittered"
