"""The console's plots: what a reader sees drawn for the points given, and nothing injected."""

from __future__ import annotations

from xml.etree import ElementTree

from kairos.services.console.lateness import LATENESS_BOUNDS_MS, bucket_of, percentile_ms
from kairos.services.console.plots import Series, plot_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_bars_are_drawn_for_minutes_with_fires_and_scaled_to_the_largest() -> None:
    svg = ElementTree.fromstring(
        plot_svg("Fires", ["07:00", "07:01", "07:02"], [Series("fires", [4, 0, 8])], "", bars=True)
    )
    bars = svg.findall(f"{SVG}rect")
    assert [float(bar.get("height", 0)) for bar in bars] == [70.0, 140.0]


def test_a_lone_point_of_a_line_is_still_drawn() -> None:
    svg = ElementTree.fromstring(
        plot_svg("Lateness", ["07:00", "07:01"], [Series("p99", [None, 250])], "ms")
    )
    assert len(svg.findall(f"{SVG}circle")) == 1


def test_titles_and_names_are_text_never_markup() -> None:
    text = plot_svg('<script>"x"</script>', ["<b>"], [Series("</svg><img>", [1])], "&")
    svg = ElementTree.fromstring(text)
    assert "<script>" not in text and "<img>" not in text
    assert svg.find(f"{SVG}text") is not None


def test_percentiles_are_the_upper_bound_of_the_bucket_they_fall_in() -> None:
    counts = [0] * len(LATENESS_BOUNDS_MS)
    counts[bucket_of(3)] += 98
    counts[bucket_of(70_000)] += 2
    assert percentile_ms(counts, 0.5) == 5
    assert percentile_ms(counts, 0.99) == 300_000
    assert percentile_ms([0] * len(LATENESS_BOUNDS_MS), 0.5) is None
    assert bucket_of(-5) == 0 and bucket_of(5) == 0 and bucket_of(6) == 1
