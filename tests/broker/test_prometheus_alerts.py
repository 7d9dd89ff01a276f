"""The repository's alert rules and dashboard on a real Prometheus (Debian's `prometheus`,
which `.ci/run` installs) scraping a real ticker (#42): `promtool` accepts the rules, every
dashboard query is one Prometheus answers, and killing every ticker makes the partition alert
fire, which a restarted ticker clears."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kairos.streams.kafka.settings import KafkaSettings
from tests.helpers import eventually
from tests.probe_client import free_port
from tests.processes import ServiceProcess, start_ticker

REPOSITORY = Path(__file__).resolve().parents[2]
RULES = REPOSITORY / "deploy" / "prometheus" / "kairos-alerts.yml"
DASHBOARD = REPOSITORY / "deploy" / "grafana" / "kairos-dashboard.json"
ALERT = "KairosPartitionWithoutTicker"


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"install Debian's prometheus package (it has {name}; see .ci/run)"
    return found


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A Prometheus scraping a ticker's metrics port every second, with the rules loaded."""
    ticker_port, port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [
                    {
                        "job_name": "kairos-ticker",
                        "static_configs": [{"targets": [f"127.0.0.1:{ticker_port}"]}],
                    }
                ],
            }
        )
    )
    process = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    try:
        base = f"http://127.0.0.1:{port}"
        eventually(lambda: _ready(base), timeout_s=60, message="Prometheus did not start")
        yield base, ticker_port
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def query(base: str, path: str, **arguments: str) -> Any:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(arguments)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]


def alert_state(base: str) -> str | None:
    for alert in query(base, "alerts")["alerts"]:
        if alert["labels"]["alertname"] == ALERT:
            return str(alert["state"])
    return None


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    """The rules' own tests (kairos-alerts.test.yml): dead letters counted by one counter alone
    fire, an audit's breach pages, an audit three hours old is stale."""
    for command in (("check", "rules", RULES), ("test", "rules", RULES.with_suffix(".test.yml"))):
        checked = subprocess.run(
            [tool("promtool"), *map(str, command)], check=False, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_killing_every_ticker_fires_the_partition_alert_and_a_restart_clears_it(
    kafka_settings: KafkaSettings, tmp_path: Path, prometheus: tuple[str, int]
) -> None:
    base, port = prometheus

    def start() -> ServiceProcess:
        return start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path, metrics_port=port)

    ticker = start()
    try:

        def owned() -> bool:
            found = query(base, "query", query="sum(kairos_ticker_owned_partitions)")["result"]
            return bool(found) and found[0]["value"][1] == str(kafka_settings.schedules_partitions)

        eventually(owned, timeout_s=60, message="Prometheus never saw the partitions owned")
        # Before the first scrape no ticker reported, which the rule counts as down (pending).
        eventually(lambda: alert_state(base) is None, timeout_s=30, message=f"{ALERT} pending")
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                query(base, "query", query=target["expr"])  # parsed and answered
        ticker.kill()
        eventually(
            lambda: alert_state(base) == "firing", timeout_s=120, message=f"{ALERT} did not fire"
        )
        ticker = start()
        eventually(lambda: alert_state(base) is None, timeout_s=60, message=f"{ALERT} stayed")
    finally:
        if ticker.process.poll() is None:
            assert ticker.stop() == 0, ticker.log()[-3000:]
