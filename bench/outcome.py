"""One result row every benchmark writes, whatever the system: comparable across peers.

A *fire* is the durable hand-off: a committed Kafka transaction for Kairos and the raw
producer, a database commit or a queue push for the peers. Lateness is observed time of that
hand-off minus the instant the occurrence was due, in milliseconds.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil


@dataclass
class Outcome:
    system: str
    """`kairos`, `raw-producer`, `apscheduler`, `redbeat`."""
    scenario: str
    """`herd`, `steady`, `failover`, `restore`."""
    n: int
    """Schedules in the scenario."""
    config: str = "tuned"
    """`tuned` (failure detection comparable to Kairos's) or `default` (the peer's defaults)."""
    fires: int = 0
    """Distinct occurrences observed fired."""
    expected: int = 0
    """Occurrences that should have fired in the observed window."""
    lost: int = 0
    duplicated: int = 0
    seconds: float | None = None
    """Herd: due instant to last fire. Steady: observed window. Failover: window."""
    fires_per_s: float | None = None
    lateness_ms: dict[str, float] = field(default_factory=dict)
    """`p50`, `p99`, `max` of (fire observed − due)."""
    cpu_s: float | None = None
    """CPU seconds used by the system's own processes during the measured window."""
    gap_s: float | None = None
    """Failover: SIGKILL to the survivor's first fire."""
    finished: bool = True
    """False when the scenario hit its time bound before every fire was observed."""
    extra: dict[str, Any] = field(default_factory=dict)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of `values` (nearest rank); empty when there are none."""
    if not values:
        return {}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]

    return {"p50": rank(0.50), "p99": rank(0.99), "max": ordered[-1]}


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": psutil.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "processor": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_outcomes(path: Path, outcomes: Iterable[Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine(), "outcomes": [asdict(o) for o in outcomes]}
    path.write_text(json.dumps(document, indent=2) + "\n")


def read_outcomes(path: Path) -> list[Outcome]:
    return [Outcome(**row) for row in json.loads(path.read_text())["outcomes"]]


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children, so far."""
    try:
        root = psutil.Process(pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
        return total
    except psutil.NoSuchProcess:
        return 0.0
