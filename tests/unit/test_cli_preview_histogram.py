"""`kairos preview --histogram`: a herd's peak minute, with and without jitter, and its limits."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.calendar import fire_instant_with_jitter
from kairos.core.preview_histogram import HistogramTooLargeError, count_fires
from kairos.core.schedule import Schedule

FROM = "2027-03-14T00:00:00Z"
MIDNIGHT = "2027-03-15T00:00:00Z"


def herd(size: int, **fields: Any) -> list[dict[str, Any]]:
    return [{"id": f"team.job-{n:04d}", "cron": "0 0 * * *", **fields} for n in range(size)]


def histogram(tmp_path: Path, schedules: list[dict[str, Any]], *args: str) -> Result:
    path = tmp_path / "schedules.yaml"
    path.write_text(yaml.safe_dump({"schedules": schedules}), encoding="utf-8")
    return CliRunner().invoke(
        app, ["preview", "-f", str(path), "--from", FROM, "--histogram", *args]
    )


def histogram_json(tmp_path: Path, schedules: list[dict[str, Any]], *args: str) -> Any:
    result = histogram(tmp_path, schedules, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_midnight_herd_without_jitter_is_one_minute_of_a_thousand(tmp_path: Path) -> None:
    shown = histogram_json(tmp_path, herd(1000))
    assert shown["total"] == 1000
    assert shown["schedules"] == 1000
    assert shown["peak"] == {"minute": MIDNIGHT, "fires": 1000, "schedules": 1000}
    assert shown["peak_with_jitter"] == shown["peak"]
    assert shown["minutes"] == {
        MIDNIGHT: {
            "fires": 1000,
            "schedules": 1000,
            "fires_with_jitter": 1000,
            "schedules_with_jitter": 1000,
        }
    }
    assert (shown["from"], shown["to"]) == (FROM, MIDNIGHT)


def test_jitter_spreads_the_herd_over_the_minutes_the_ticker_starts_them(tmp_path: Path) -> None:
    schedules = herd(1000, jitter="10m")
    shown = histogram_json(tmp_path, schedules)
    # Due together: the nominal peak is the whole herd.
    assert shown["peak"] == {"minute": MIDNIGHT, "fires": 1000, "schedules": 1000}
    started = {
        minute: load["fires_with_jitter"]
        for minute, load in shown["minutes"].items()
        if load["fires_with_jitter"]
    }
    # Each run starts when the ticker starts it: its own jitter, computed as the ticker does.
    midnight = datetime(2027, 3, 15, tzinfo=UTC)
    expected = Counter(
        fire_instant_with_jitter(s["id"], Schedule.model_validate(s), midnight)
        .replace(second=0, microsecond=0)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        for s in schedules
    )
    assert started == dict(expected)
    assert len(started) == 10
    assert sum(started.values()) == 1000
    peak = shown["peak_with_jitter"]
    assert 100 <= peak["fires"] < 160
    assert peak["fires"] == peak["schedules"] == max(started.values())


def test_the_text_report_lists_the_busiest_minutes_first(tmp_path: Path) -> None:
    schedules = [
        *herd(1000, jitter="10m"),
        {"id": "team.quiet", "cron": "30 6 * * *"},
        {"id": "team.held", "cron": "0 0 * * *", "paused": True},
    ]
    result = histogram(tmp_path, schedules, "--top", "3")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "fires of 1001 schedule(s) (1 paused not counted) due in "
        "(2027-03-14T00:00:00Z, 2027-03-15T00:00:00Z], per UTC minute"
    )
    assert lines[1].startswith("busiest 3 of 11 minute(s) with a fire")
    assert lines[2].split() == [
        "MINUTE",
        "(UTC)",
        "FIRES",
        "SCHEDULES",
        "WITH",
        "JITTER",
        "SCHEDULES",
    ]
    first, second, third = (line.split() for line in lines[3:6])
    assert first[:3] == [MIDNIGHT, "1000", "1000"]
    # Then the minutes the jittered runs start in, the busiest first.
    assert second[1:3] == third[1:3] == ["0", "0"]
    assert int(second[3]) >= int(third[3])
    assert lines[6:8] == [
        "total: 1001 fire(s)",
        f"peak: {MIDNIGHT}, 1000 fire(s) of 1000 schedule(s)",
    ]
    # The jittered peak is the busiest minute of starts: midnight's share, or the next row's.
    starts = max(int(first[3]), int(second[3]))
    assert lines[8].startswith("peak with jitter: 2027-03-15T00:0")
    assert lines[8].endswith(f", {starts} fire(s) of {starts} schedule(s)")
    assert len(lines) == 9


def test_schedules_share_a_calendar_only_when_their_occurrences_are_the_same() -> None:
    start = datetime(2027, 11, 7, tzinfo=UTC)
    schedules = [
        # 01:30 New York happens twice on 7 November 2027: one policy runs both, one the first.
        Schedule(id="a", cron="30 1 * * *", timezone="America/New_York", dst_repeat="both"),
        Schedule(id="b", cron="30 1 * * *", timezone="America/New_York", owner="other"),
        Schedule(id="c", cron="30 1 * * *", timezone="America/New_York", job={"kind": "x"}),
        Schedule(id="d", cron="30 1 * * *", timezone="Europe/Paris"),
    ]
    counted = count_fires(schedules, start, start + timedelta(days=1))
    first_pass, second_pass, paris = (
        datetime(2027, 11, 7, 5, 30, tzinfo=UTC),
        datetime(2027, 11, 7, 6, 30, tzinfo=UTC),
        datetime(2027, 11, 7, 0, 30, tzinfo=UTC),
    )
    by_instant = {
        datetime.fromtimestamp(minute * 60, UTC): (load.fires, load.schedules)
        for minute, load in counted.minutes.items()
    }
    assert by_instant == {paris: (1, 1), first_pass: (3, 3), second_pass: (1, 1)}
    assert counted.total == 5


def test_a_schedule_firing_several_times_a_minute_counts_each_fire_once_per_schedule() -> None:
    start = datetime(2027, 1, 1, tzinfo=UTC)
    poll = Schedule(id="poll", every="10s", start_at=start)
    counted = count_fires([poll], start, start + timedelta(minutes=2))
    loads = [(load.fires, load.schedules) for _, load in sorted(counted.minutes.items())]
    # (start, start + 2m]: 00:00:10 to 00:00:50, 00:01:00 to 00:01:50, then 00:02:00.
    assert loads == [(5, 1), (6, 1), (1, 1)]


def test_nothing_due_in_the_horizon_says_so(tmp_path: Path) -> None:
    result = histogram(tmp_path, [{"id": "yearly", "cron": "0 0 1 1 *"}], "--horizon", "7d")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        "total: 0 fire(s)",
        "peak: none (no fire in the horizon)",
        "peak with jitter: none (no fire in the horizon)",
    ]


def test_the_horizon_bounds_the_window_of_nominal_instants(tmp_path: Path) -> None:
    shown = histogram_json(tmp_path, [{"id": "hourly", "cron": "0 * * * *"}], "--horizon", "90m")
    assert shown["to"] == "2027-03-14T01:30:00Z"
    assert list(shown["minutes"]) == ["2027-03-14T01:00:00Z"]


def test_a_selection_beyond_the_budget_is_refused_naming_the_way_out() -> None:
    start = datetime(2027, 1, 1, tzinfo=UTC)
    schedules = [Schedule(id=f"s{n}", cron="* * * * *", jitter="30s") for n in range(10)]
    assert count_fires(schedules, start, start + timedelta(hours=1), budget=1000).total == 600
    with pytest.raises(HistogramTooLargeError) as refused:
        count_fires(schedules, start, start + timedelta(hours=1), budget=599)
    assert str(refused.value) == (
        "the histogram would compute more than 599 fires over --horizon 1h; shorten --horizon "
        "or select fewer schedules (--id, --owner, or a smaller file)"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["--horizon", "32d"],
            "--horizon '32d' is longer than the maximum, 31d; shorten it",
            id="horizon-too-long",
        ),
        pytest.param(
            ["--horizon", "tomorrow"], "--horizon: invalid duration 'tomorrow'", id="horizon-bad"
        ),
        pytest.param(["--horizon", "0s"], "--horizon '0s' is empty", id="horizon-empty"),
    ],
)
def test_a_bad_horizon_is_refused(tmp_path: Path, args: list[str], expected: str) -> None:
    result = histogram(tmp_path, herd(1), *args)
    assert result.exit_code == 2
    assert expected in result.stderr
    assert result.stdout == ""
