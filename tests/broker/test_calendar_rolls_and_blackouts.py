"""A roll whose calendar changes while its occurrences wait, and a blackout deferring into its
end: real broker, real ticker process, and the audit, which works out what calendars owe apart.

`rolled` runs every two seconds with today and tomorrow holidays: each occurrence rolls two
days on and nothing fires. The holidays are then removed: the occurrences that waited run at
once, each under its own run id and once, and the later ones on time. `deferred` runs every two
seconds across an eight-second blackout window: the occurrences inside it are skipped as
coalesced but the last, which runs at the window's end.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually, sleep_until
from tests.kafka_helpers import read_topic
from tests.processes import start_ticker

CODECS = make_codecs()
SECOND = timedelta(seconds=1)
EVERY_DAY = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def apply(settings: KafkaSettings, path: Path, document: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(document))
    kind = ["calendars", "apply"] if "calendars" in document else ["apply"]
    applied = kairos(settings, *kind, "-f", str(path))
    assert applied.exit_code == 0, applied.output


def calendars(start: datetime, *, holidays: bool) -> dict[str, Any]:
    today = start.date()
    closed = [{"date": (today + timedelta(days=n)).isoformat(), "name": "closed"} for n in (0, 1)]
    freeze = {
        "name": "freeze",
        "start": (start + 6 * SECOND).replace(tzinfo=None).isoformat(),
        "end": (start + 14 * SECOND).replace(tzinfo=None).isoformat(),
    }
    return {
        "calendars": [
            {
                "id": "desk",
                "owner": "ops",
                "business_days": EVERY_DAY,
                "holidays": closed if holidays else [],
            },
            {"id": "freeze", "owner": "ops", "windows": [freeze]},
        ]
    }


def schedules(start: datetime) -> dict[str, Any]:
    common = {"every": "2s", "start_at": start.isoformat(), "owner": "ops"}
    return {
        "schedules": [
            {"id": "ops.rolled", **common, "exclude": ["desk"], "roll": "next_business_day"},
            {"id": "ops.deferred", **common, "blackout": ["freeze"], "blackout_action": "defer"},
        ]
    }


def records(settings: KafkaSettings, role: TopicRole, decode: Any, sid: str) -> list[Any]:
    topic = settings.layout.name(role)
    read = read_topic(settings.bootstrap_servers, topic, decode)
    return [value for _, value in read if value["schedule_id"] == sid]


def test_a_roll_whose_calendar_changes_and_a_deferral_run_each_occurrence_once(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + 8 * SECOND
    apply(kafka_settings, tmp_path / "calendars.yaml", calendars(start, holidays=True))
    apply(kafka_settings, tmp_path / "schedules.yaml", schedules(start))
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    try:
        sleep_until(start + 9 * SECOND)
        assert _fired(kafka_settings, "ops.rolled") == [], "rolled two days on"
        changed_at = datetime.now(UTC)
        apply(kafka_settings, tmp_path / "open.yaml", calendars(start, holidays=False))
        end = start + 20 * SECOND
        eventually(
            lambda: _fired(kafka_settings, "ops.rolled")[-1:] >= [end],
            timeout_s=60,
            message="the rolled occurrences run once the holidays are gone",
        )
        eventually(
            lambda: _fired(kafka_settings, "ops.deferred")[-1:] >= [end],
            timeout_s=30,
            message="the deferred schedule fires past its window",
        )
    finally:
        ticker.stop()
    _assert_the_roll_waited_then_ran(kafka_settings, start, changed_at, end)
    _assert_the_window_deferred_its_last(kafka_settings, start, end)
    audit = kairos(
        kafka_settings,
        "audit",
        "verify",
        "--from",
        start.isoformat(),
        "--to",
        end.isoformat(),
        "--json",
    )
    assert audit.exit_code == 0, audit.output
    assert json.loads(audit.stdout)["verdict"] == "holds", audit.stdout


def _fired(settings: KafkaSettings, sid: str) -> list[datetime]:
    runs = records(settings, TopicRole.RUNS, CODECS.run_requested.decode, sid)
    return sorted(run["nominal_at"] for run in runs if run["attempt"] == 1)


def _assert_the_roll_waited_then_ran(
    settings: KafkaSettings, start: datetime, changed_at: datetime, end: datetime
) -> None:
    runs = records(settings, TopicRole.RUNS, CODECS.run_requested.decode, "ops.rolled")
    nominals = [run["nominal_at"] for run in runs]
    assert len(nominals) == len(set(nominals)), "an occurrence ran twice"
    owed = [start + 2 * n * SECOND for n in range(11)]
    assert [n for n in sorted(nominals) if n <= end] == owed
    for run in runs:
        # Before the change every occurrence waited for the business day two days on; after
        # it, each ran at its own instant, or at once if that had passed.
        assert run["fired_at"] >= max(run["nominal_at"], changed_at), run


def _assert_the_window_deferred_its_last(
    settings: KafkaSettings, start: datetime, end: datetime
) -> None:
    runs = {
        run["nominal_at"]: run
        for run in records(settings, TopicRole.RUNS, CODECS.run_requested.decode, "ops.deferred")
    }
    events = records(settings, TopicRole.RUN_EVENTS, CODECS.run_event.decode, "ops.deferred")
    coalesced = sorted(e["nominal_at"] for e in events if e["kind"] == "skipped")
    assert coalesced == [start + 6 * SECOND, start + 8 * SECOND, start + 10 * SECOND]
    assert all("coalesced" in e["reason"] for e in events if e["kind"] == "skipped")
    last_inside = runs[start + 12 * SECOND]
    assert last_inside["fired_at"] >= start + 14 * SECOND, "runs at the window's end"
    outside = [start + 2 * n * SECOND for n in (0, 1, 2, 7, 8, 9, 10)]
    assert all(nominal in runs for nominal in outside)
    assert max(runs) >= end
