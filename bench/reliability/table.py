"""The markdown table of docs/reliability.md from a suite's JSON files.

Run: `.venv/bin/python -m bench.reliability.table bench/results/reliability*.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.reliability.__main__ import SCENARIOS

HEADER = (
    "| scenario | what happens | Kafka's own promise | expected | lost | committed twice "
    "| executed twice | unfinished | lateness p50 / p99 / max |\n"
    "|---|---|---|---:|---:|---:|---:|---:|---|"
)


def _seconds(ms: float | None) -> str:
    return "–" if ms is None else f"{ms / 1000:.1f} s"


def row(result: dict[str, Any]) -> str:
    scenario = SCENARIOS[result["name"]]
    late = result["lateness_ms"]
    lateness = " / ".join(_seconds(late.get(q)) for q in ("p50", "p99", "max"))
    return (
        f"| `{result['name']}` | {scenario.what} | {scenario.kafka_promise} "
        f"| {result['expected']:,} | {result['lost']} | {result['committed_twice']} "
        f"| {result['executed_twice']} | {result['unfinished']} | {lateness} |"
    )


def main() -> None:
    """One table of the results of every file given, in their order (a suite run in parts)."""
    rows = []
    for path in sys.argv[1:]:
        document = json.loads(Path(path).read_text())
        print(
            f"{path}: commit {document.get('commit', '?')}, seed {document['seed']}, "
            f"{document['size']:,} schedules, measured {document.get('measured_at', '?')}."
        )
        rows += [row(result) for result in document["results"]]
    print(f"\n{HEADER}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
