"""Seed calendars come from the `holidays` package; the expected dates are the package's too."""

from __future__ import annotations

from datetime import date

import holidays
import pytest
import yaml

from kairos.core.business_calendar import Weekday, load_calendars
from kairos.core.calendar_seeds import SeedError, calendar_document, seed_calendar

YEARS = range(2026, 2031)


def test_a_country_seed_holds_the_packages_holidays_of_every_year() -> None:
    seeded = seed_calendar(calendar_id="us-federal", owner="treasury", years=YEARS, country="US")
    expected = holidays.country_holidays("US", years=YEARS)

    christmas = date(2026, 12, 25)
    assert seeded.holiday_name(christmas) == expected[christmas]
    assert not seeded.is_business_day(christmas)
    assert {h.date: h.name for h in seeded.holidays} == dict(expected.items())
    assert seeded.business_days == (Weekday.MON, Weekday.TUE, Weekday.WED, Weekday.THU, Weekday.FRI)
    assert "holidays package" in (seeded.description or "")


def test_a_market_seed_closes_on_good_friday_which_the_federal_calendar_does_not() -> None:
    good_friday = date(2026, 4, 3)
    nyse = seed_calendar(calendar_id="nyse", owner="markets", years=YEARS, market="NYSE")
    federal = seed_calendar(calendar_id="us-federal", owner="treasury", years=YEARS, country="US")

    assert nyse.holiday_name(good_friday) == holidays.financial_holidays("NYSE")[good_friday]
    assert not nyse.is_business_day(good_friday)
    assert federal.is_business_day(good_friday) is (good_friday not in holidays.US(years=2026))


def test_a_subdivision_adds_its_own_holidays() -> None:
    state = seed_calendar(calendar_id="us-ny", owner="ops", years=YEARS, country="US", subdiv="NY")

    expected = holidays.country_holidays("US", subdiv="NY", years=YEARS)
    assert {h.date for h in state.holidays} == set(expected)
    assert len(state.holidays) > len(holidays.country_holidays("US", years=YEARS))


def test_a_seed_written_as_a_file_reads_back_as_the_same_calendar() -> None:
    seeded = seed_calendar(
        calendar_id="nyse", owner="markets", years=YEARS, market="NYSE", timezone="America/New_York"
    )

    text = yaml.safe_dump(calendar_document([seeded]), sort_keys=False, allow_unicode=True)

    assert load_calendars(text, "yaml") == [seeded]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        pytest.param({"country": "XX"}, "ISO 3166", id="unknown-country"),
        pytest.param({"country": "US", "subdiv": "ZZ"}, "subdivisions of US are", id="bad-subdiv"),
        pytest.param({"market": "NOPE"}, "knows the markets", id="unknown-market"),
        pytest.param({}, "exactly one", id="neither"),
        pytest.param({"country": "US", "market": "NYSE"}, "exactly one", id="both"),
        pytest.param({"market": "NYSE", "subdiv": "NY"}, "add --country", id="subdiv-of-market"),
        pytest.param({"country": "US", "years": range(2026, 2026)}, "1 to 50", id="no-years"),
        pytest.param({"country": "US", "years": range(2000, 2100)}, "1 to 50", id="a-century"),
        pytest.param({"country": "US", "calendar_id": "a b"}, "not a valid id", id="bad-id"),
    ],
)
def test_an_impossible_seed_says_what_to_ask_for(options: dict[str, object], fragment: str) -> None:
    arguments: dict[str, object] = {"calendar_id": "seed", "owner": "ops", "years": YEARS}
    arguments.update(options)

    with pytest.raises(SeedError, match=fragment):
        seed_calendar(**arguments)  # type: ignore[arg-type]
