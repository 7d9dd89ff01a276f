"""Charts and tables from benchmark Outcome files, whichever systems they hold.

Run: `.venv/bin/python -m bench.plot bench/results/*.json --out docs/img`.

Draws, for the systems present (any subset of kairos, raw-producer and the peers):

- `herd_seconds.png`: herd, due instant to last fire against N (log-log);
- `herd_p99_lateness.png`: herd, p99 lateness against N;
- `steady_p99_lateness.png`: steady load, p99 lateness against N;

and prints one markdown table per scenario. Its ratio column divides the Kairos rate by the
row's rate at the same N (the same config when Kairos has one), so against a peer it reads
Kairos/peer and against the raw producer Kairos/raw-producer; above 1, Kairos is faster.
A series is a system, with its config and ticker count added where they tell series apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a benchmark machine
import matplotlib.pyplot as plt

from bench.outcome import Outcome, read_outcomes

KAIROS = "kairos"


def load(paths: Sequence[Path]) -> list[Outcome]:
    outcomes = []
    for path in paths:
        try:
            outcomes += read_outcomes(path)
        except (KeyError, TypeError, json.JSONDecodeError) as error:
            # herd.json and restore.json of before bench/outcome.py hold another shape.
            print(
                f"skipped {path}: not Outcome rows ({error!r}); re-run its benchmark",
                file=sys.stderr,
            )
    return outcomes


def tickers(outcome: Outcome) -> int:
    return int(outcome.extra.get("tickers", 1))


def label(outcome: Outcome, rows: Sequence[Outcome]) -> str:
    """The series name: the system, with what tells its series apart within `rows`."""
    same = [o for o in rows if o.system == outcome.system]
    text = outcome.system
    if len({o.config for o in same}) > 1:
        text += f" ({outcome.config})"
    if len({tickers(o) for o in same}) > 1:
        count = tickers(outcome)
        text += f", {count} ticker{'s' if count > 1 else ''}"
    return text


def rate(outcome: Outcome) -> float | None:
    """Fires per second; records per second for a restore (higher is better either way)."""
    if outcome.fires_per_s is not None:
        return outcome.fires_per_s
    records = outcome.extra.get("records_per_s")
    return None if records is None else float(records)


def kairos_reference(outcome: Outcome, rows: Sequence[Outcome]) -> Outcome | None:
    """The Kairos row `outcome` compares with: same N, the same config and tickers if any."""
    candidates = [o for o in rows if o.system == KAIROS and o.n == outcome.n]
    candidates.sort(key=lambda o: (o.config != outcome.config, tickers(o) != tickers(outcome)))
    return candidates[0] if candidates else None


def chart(
    rows: Sequence[Outcome],
    value: Callable[[Outcome], float | None],
    ylabel: str,
    title: str,
    path: Path,
) -> None:
    series: dict[str, list[tuple[int, float, bool]]] = defaultdict(list)
    for outcome in rows:
        y = value(outcome)
        if y is not None and y > 0:  # a log axis has no zero
            series[label(outcome, rows)].append((outcome.n, y, outcome.finished))
    if not series:
        print(f"no data for {path.name}", file=sys.stderr)
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, points in sorted(series.items()):
        points.sort()
        (line,) = axes.plot([n for n, _, _ in points], [y for _, y, _ in points], label=name)
        for n, y, finished in points:
            # A run stopped at its time bound is a lower bound, not a result: draw it hollow.
            axes.plot(
                n, y, marker="o", color=line.get_color(), fillstyle="full" if finished else "none"
            )
    if any(not finished for points in series.values() for _, _, finished in points):
        title += "\n(hollow: stopped at the time bound before every fire; a lower bound)"
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("schedules (N)")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"wrote {path}")


def _number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def table(scenario: str, rows: Sequence[Outcome]) -> str:
    unit = "records/s" if scenario == "restore" else "fires/s"
    columns: list[tuple[str, Callable[[Outcome], str]]] = [
        ("system", lambda o: label(o, rows)),
        ("N", lambda o: f"{o.n:,}"),
        (f"{unit} (higher is better)", lambda o: _number(rate(o))),
        (f"Kairos/this system, {unit} (above 1: Kairos faster)", lambda o: _ratio(o, rows)),
        ("lateness p50 ms", lambda o: _number(o.lateness_ms.get("p50"))),
        ("p99 ms", lambda o: _number(o.lateness_ms.get("p99"))),
        ("max ms", lambda o: _number(o.lateness_ms.get("max"))),
        ("gap s", lambda o: _number(o.gap_s, 2)),
        ("seconds", lambda o: _number(o.seconds, 2)),
        ("fires/expected", lambda o: f"{o.fires:,}/{o.expected:,}" if o.expected else "—"),
        ("lost", lambda o: f"{o.lost:,}" if o.expected else "—"),
        ("dup", lambda o: f"{o.duplicated:,}" if o.expected else "—"),
        ("CPU s", lambda o: _number(o.cpu_s, 1)),
        ("RSS MB", lambda o: _number(o.extra.get("rss_mb"))),
        ("finished", lambda o: "yes" if o.finished else "**no**"),
    ]
    ordered = sorted(rows, key=lambda o: (o.n, o.system != KAIROS, label(o, rows)))
    cells = [[render(o) for _, render in columns] for o in ordered]
    # A column empty in every row says nothing about this scenario.
    keep = [i for i in range(len(columns)) if any(row[i] != "—" for row in cells)]
    lines = [
        f"### {scenario}",
        "",
        "| " + " | ".join(columns[i][0] for i in keep) + " |",
        "|" + "---|" * len(keep),
        *("| " + " | ".join(row[i] for i in keep) + " |" for row in cells),
    ]
    return "\n".join(lines)


def _ratio(outcome: Outcome, rows: Sequence[Outcome]) -> str:
    reference = kairos_reference(outcome, rows)
    if outcome.system == KAIROS or reference is None:
        return "—"
    ours, theirs = rate(reference), rate(outcome)
    if ours is None or not theirs:
        return "—"
    return f"{ours / theirs:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+", help="Outcome JSON files")
    parser.add_argument("--out", type=Path, required=True, help="directory for the PNGs")
    args = parser.parse_args()
    by_scenario: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in load(args.files):
        by_scenario[outcome.scenario].append(outcome)
    herd, steady = by_scenario.get("herd", []), by_scenario.get("steady", [])
    chart(
        herd,
        lambda o: o.seconds,
        "due instant to last fire (s)",
        "Herd: N schedules due at the same instant",
        args.out / "herd_seconds.png",
    )
    chart(
        herd,
        lambda o: o.lateness_ms.get("p99"),
        "p99 lateness (ms)",
        "Herd: p99 lateness",
        args.out / "herd_p99_lateness.png",
    )
    chart(
        steady,
        lambda o: o.lateness_ms.get("p99"),
        "p99 lateness (ms)",
        "Steady: N every-minute schedules spread over the minute",
        args.out / "steady_p99_lateness.png",
    )
    for scenario, rows in sorted(by_scenario.items()):
        print()
        print(table(scenario, rows))


if __name__ == "__main__":
    main()
