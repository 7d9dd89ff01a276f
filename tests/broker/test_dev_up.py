"""`kairos dev up`: the one-command local deployment shows a run succeeding and cleans up."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_dev_up_shows_a_run_succeeding_and_leaves_nothing_running(tmp_path: Path) -> None:
    home = tmp_path / "dev"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kairos.cli",
            "dev",
            "up",
            "--home",
            str(home),
            "--stop-after",
            "1",
            "--timeout",
            "150",
            "--console-listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "applied 2 schedules" in result.stdout
    assert re.search(r"console http://127\.0\.0\.1:\d+ \(read-only\)", result.stdout)
    assert "succeeded     sample." in result.stdout
    assert "stopped everything dev up started" in result.stdout
    leftovers = subprocess.run(
        ["pgrep", "-f", str(home)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert leftovers == [], "dev up left processes running"
