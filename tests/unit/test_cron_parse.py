"""Cron syntax: fields, names, ranges, lists, steps, macros, and cronie's `*` flags."""

from __future__ import annotations

from datetime import date

import pytest

from kairos.core.cron import CronSyntaxError, parse_cron

pytestmark = pytest.mark.unit


def test_fields_expand() -> None:
    expr = parse_cron("*/20 1-3,23 1,15 JAN-mar mon-FRI")
    assert expr.minutes == (0, 20, 40)
    assert expr.hours == (1, 2, 3, 23)
    assert expr.days_of_month == {1, 15}
    assert expr.months == {1, 2, 3}
    assert expr.days_of_week == {1, 2, 3, 4, 5}
    assert expr.wildcard and not expr.dom_star and not expr.dow_star


def test_sunday_is_zero_or_seven() -> None:
    assert parse_cron("0 0 * * 7").days_of_week == {0}
    assert parse_cron("0 0 * * 5-7").days_of_week == {5, 6, 0}


@pytest.mark.parametrize(
    ("macro", "expansion"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros(macro: str, expansion: str) -> None:
    expanded = parse_cron(expansion)
    got = parse_cron(macro)
    assert (
        got.minutes,
        got.hours,
        got.days_of_month,
        got.months,
        got.days_of_week,
        got.wildcard,
    ) == (
        expanded.minutes,
        expanded.hours,
        expanded.days_of_month,
        expanded.months,
        expanded.days_of_week,
        expanded.wildcard,
    )


@pytest.mark.parametrize(
    ("expression", "wildcard"),
    [
        ("30 2 * * *", False),
        ("0,30 1-3 * * *", False),
        ("*/15 2 * * *", True),
        ("0 * * * *", True),
        ("0 */2 * * *", True),
        ("@hourly", True),
        ("@daily", False),
    ],
)
def test_wildcard_means_minute_or_hour_starts_with_star(expression: str, wildcard: bool) -> None:
    assert parse_cron(expression).wildcard is wildcard


@pytest.mark.parametrize(
    ("expression", "day", "matches"),
    [
        pytest.param("0 0 13 * 5", date(2027, 8, 6), True, id="or-friday"),
        pytest.param("0 0 13 * 5", date(2027, 8, 13), True, id="or-thirteenth"),
        pytest.param("0 0 13 * 5", date(2027, 8, 7), False, id="or-neither"),
        pytest.param("0 0 */2 * 5", date(2027, 8, 6), False, id="and-even-friday"),
        pytest.param("0 0 */2 * 5", date(2027, 8, 13), True, id="and-odd-friday"),
        pytest.param("0 0 13 * *", date(2027, 8, 13), True, id="dom-only"),
        pytest.param("0 0 * * 5", date(2027, 8, 13), True, id="dow-only"),
        pytest.param("0 0 * 2 *", date(2027, 8, 13), False, id="wrong-month"),
    ],
)
def test_day_matching(expression: str, day: date, matches: bool) -> None:
    assert parse_cron(expression).matches_date(day) is matches


@pytest.mark.parametrize(
    ("expression", "never"),
    [
        ("0 0 30 2 *", True),
        ("0 0 31 4,6,9,11 *", True),
        ("0 0 29 2 *", False),
        ("0 0 30 2 1", False),
        ("0 0 31 * *", False),
    ],
)
def test_never_matches(expression: str, never: bool) -> None:
    assert parse_cron(expression).never_matches is never


@pytest.mark.parametrize(
    ("expression", "field", "problem"),
    [
        pytest.param("", None, "expected 5 fields", id="empty"),
        pytest.param("* * * *", None, "got 4", id="four-fields"),
        pytest.param("0 * * * * *", None, "no seconds", id="six-fields"),
        pytest.param("@often", None, "unknown macro", id="unknown-macro"),
        pytest.param("60 * * * *", "minute", "out of range 0–59", id="minute-range"),
        pytest.param("* 24 * * *", "hour", "out of range 0–23", id="hour-range"),
        pytest.param("* * 0 * *", "day-of-month", "out of range 1–31", id="dom-zero"),
        pytest.param("* * * 13 *", "month", "out of range 1–12", id="month-range"),
        pytest.param("* * * * 8", "day-of-week", "out of range 0–7", id="dow-range"),
        pytest.param("*/0 * * * *", "minute", "at least 1", id="step-zero"),
        pytest.param("*/x * * * *", "minute", "at least 1", id="step-word"),
        pytest.param("1,,2 * * * *", "minute", "empty list item", id="empty-item"),
        pytest.param("* * * * FRIDAY", "day-of-week", "'FRIDAY' is not a number", id="long-name"),
        pytest.param("MON * * * *", "minute", "'MON' is not a number", id="name-in-minutes"),
        pytest.param("* * * * 5#6", "day-of-week", "after '#' must be 1–5", id="sixth-week"),
        pytest.param("* * * * 5#0", "day-of-week", "after '#' must be 1–5", id="week-zero"),
        pytest.param("* * L-31 * *", "day-of-month", "must be 1–30", id="last-minus-31"),
        pytest.param("* * 1W,15 * *", "day-of-month", "stands alone", id="w-in-list"),
        pytest.param("* * W * *", "day-of-month", "write the day before 'W'", id="w-alone"),
        pytest.param("* * 32W * *", "day-of-month", "out of range 1–31", id="w-day-range"),
        pytest.param("* * * * L,MON", "day-of-week", "'L' stands alone", id="l-in-a-list"),
        pytest.param("* * L-3W * *", "day-of-month", "write 'LW'", id="last-minus-w"),
        pytest.param("* * * * MON,FRI#3", "day-of-week", "cannot share", id="mixed-nth"),
        pytest.param("* * * * 9L", "day-of-week", "out of range 0–7", id="last-day-range"),
        pytest.param("H * * * *", "minute", "'jitter'", id="hashed"),
        pytest.param("R/5 * * * *", "minute", "'jitter'", id="random"),
        pytest.param("* * ?5 * *", "day-of-month", "", id="question-with-more"),
        pytest.param("? * * * *", "minute", "", id="question-in-minutes"),
    ],
)
def test_syntax_errors_name_field_and_problem(
    expression: str, field: str | None, problem: str
) -> None:
    with pytest.raises(CronSyntaxError) as caught:
        parse_cron(expression)
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert repr(expression) in str(caught.value)
