"""Two deployments share one cluster: same instance names, default group and transactional ids.

Every id a deployment claims is namespaced by its topic prefix, so staging's ticker `t1` and
production's ticker `t1` neither fence each other's transactions nor rebalance each other's
groups (before, both joined `kairos-tickers`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import create_topics
from tests.helpers import eventually, sleep_until, unique_name
from tests.processes import ServiceProcess, start_executor, start_ticker

SECOND = timedelta(seconds=1)
SCHEDULES = 20
PERIOD = 2 * SECOND


def deployment(bootstrap: str, admin: AdminClient, name: str) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique_name(name) + ".",
        schedules_partitions=4,
    )
    create_topics(admin, settings.layout)
    return settings


def audit(settings: KafkaSettings, start: datetime, end: datetime) -> dict[str, Any]:
    """The window's audit once it passes and every fired run succeeded."""
    result = CliRunner().invoke(
        app,
        [
            "--bootstrap-servers",
            settings.bootstrap_servers,
            "--topic-prefix",
            settings.topic_prefix,
            "audit",
            "verify",
            "--from",
            f"{start:%Y-%m-%dT%H:%M:%SZ}",
            "--to",
            f"{end:%Y-%m-%dT%H:%M:%SZ}",
            "--grace",
            "1s",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stdout[-2000:] or result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["outcomes"].get("succeeded", 0) == report["fired"], report["outcomes"]
    return report


def test_two_deployments_with_the_same_instance_names_share_a_broker(
    kafka_bootstrap: str, admin: AdminClient, tmp_path: Path
) -> None:
    staging = deployment(kafka_bootstrap, admin, "staging")
    production = deployment(kafka_bootstrap, admin, "production")
    start = datetime.now(UTC).replace(microsecond=0) + 8 * SECOND
    for settings in (staging, production):
        with SchedulesClient(settings, changed_by="two-deployments-test") as client:
            client.upsert_all(
                [
                    Schedule(id=f"job-{n:02d}", every=PERIOD, start_at=start)
                    for n in range(SCHEDULES)
                ]
            )
    services: list[ServiceProcess] = []
    try:
        for settings in (staging, production):
            logs = tmp_path / settings.topic_prefix
            logs.mkdir()
            services.append(start_ticker(settings, "t1", logs / "t1", logs))
            services.append(start_executor(settings, "e1", logs / "e1", logs))
        for ticker in services[::2]:
            ticker.wait_for_log("handover event=assigned")
        end = start + 10 * SECOND
        sleep_until(end + SECOND)
        reports = [
            eventually(
                partial(audit, settings, start, end),
                timeout_s=90,
                interval_s=2,
                message=f"{settings.topic_prefix}: runs lost or not executed",
            )
            for settings in (staging, production)
        ]
    finally:
        codes = [service.stop() for service in services]
    assert codes == [0] * len(services), [service.log()[-2000:] for service in services]
    expected = SCHEDULES * -(-(end - start) // PERIOD)
    for report in reports:
        assert (report["expected"], report["fired"]) == (expected, expected), report
        assert (report["lost"], report["duplicates"], report["unexpected"]) == (0, 0, 0)
    for ticker in services[::2]:
        log = ticker.log()
        # Neither ticker's transactions were fenced or aborted by the other deployment's.
        for trace in ("fenc", "aborted", "rebuilding"):
            assert trace not in log.lower(), log[-3000:]
