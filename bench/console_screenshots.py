"""The screenshots of docs/console.md, made from a real deployment: a local broker, a ticker, an
executor and the console, a few teams' schedules firing for some minutes, one audit window.

    .venv/bin/python -m bench.console_screenshots [--minutes 4]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from selenium.webdriver.common.by import By

from bench.common import deployment, local_broker, publish, wait_for
from kairos.cli.console import console_arguments
from kairos.cli.executor import executor_arguments
from kairos.cli.ticker import ticker_arguments
from kairos.core.schedule import Schedule
from tests.browser import chromium

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "img"
TEAMS = ("billing", "payments", "reporting", "search")


def schedules() -> list[Schedule]:
    shell = {"kind": "shell", "command": "sleep 0.2"}
    found = [
        Schedule.model_validate(
            {
                "id": f"{team}.sync-{n:02d}",
                "cron": "* * * * *",
                "owner": team,
                "labels": {"tier": "gold" if n % 3 == 0 else "silver"},
                "jitter": "20s",
                "job": shell,
            }
        )
        for team in TEAMS
        for n in range(12)
    ]
    found += [
        Schedule.model_validate(s)
        for s in [
            {"id": "billing.settlement-report", "cron": "30 2 * * *", "owner": "billing",
             "timezone": "America/New_York", "start_at": "2027-03-10T00:00:00Z",
             "labels": {"tier": "gold"}, "description": "The 2 a.m. settlement report",
             "job": shell},
            {"id": "reporting.flaky-export", "cron": "* * * * *", "owner": "reporting",
             "max_attempts": 1, "job": {"kind": "shell", "command": "exit 3"}},
            {"id": "search.reindex", "cron": "0 */6 * * *", "owner": "search", "paused": True,
             "job": shell},
        ]
    ]  # fmt: skip
    return found


def start(arguments: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kairos.cli", *arguments], stdout=out, stderr=out
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=int, default=4, help="how long schedules fire first")
    args = parser.parse_args()
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temp, local_broker(Path(temp)) as broker:
        work = Path(temp)
        assert broker.bootstrap_servers is not None
        settings = deployment(broker.bootstrap_servers, "kairos.")
        publish(settings, schedules())
        processes = [
            start(ticker_arguments(settings, "ticker-a", work / "t"), work / "ticker.log"),
            start(executor_arguments(settings, "executor-1", work / "e"), work / "exec.log"),
            start(console_arguments(settings, work / "c", "127.0.0.1:0"), work / "console.log"),
        ]
        try:
            base = _address(work / "console.log")
            began = datetime.now(UTC)
            time.sleep(args.minutes * 60)
            _shoot(base, began)
        finally:
            for process in processes:
                process.terminate()
                process.wait(60)


def _address(log: Path) -> str:
    found: list[str] = []

    def serving() -> bool:
        found[:] = re.findall(r"console serving on (http://\S+)", log.read_text())
        return bool(found)

    wait_for(serving, 60, "the console")
    return found[0]


def _shoot(base: str, began: datetime) -> None:
    browser = chromium(1280, 1300)
    try:
        pages = {
            "schedules": "/schedules?owner=billing",
            "schedule": "/schedules/billing.settlement-report",
            "partitions": "/partitions",
            "activity": "/activity?hours=1",
        }
        browser.get(base + "/activity?hours=1")  # starts the herd's count
        time.sleep(5)
        for name, path in pages.items():
            browser.get(base + path)
            browser.save_screenshot(str(IMAGES / f"console-{name}.png"))
        start = began.replace(second=0, microsecond=0) + timedelta(minutes=1)
        window = {"from": start.isoformat(), "to": (start + timedelta(minutes=2)).isoformat()}
        request = urllib.request.Request(
            base + "/api/v1/audits", data=json.dumps(window).encode(), method="POST"
        )
        with urllib.request.urlopen(request) as answer:
            audit_id = json.load(answer)["audit_id"]
        browser.get(f"{base}/audit/{audit_id}")

        def done() -> bool:
            browser.refresh()
            return any(e.text == "done" for e in browser.find_elements(By.ID, "audit-state"))

        wait_for(done, 120, "the audit")
        browser.save_screenshot(str(IMAGES / "console-audit.png"))
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
