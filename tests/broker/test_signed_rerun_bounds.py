"""Re-run requests bounded where they are taken: a real broker, a ticker in `--ownership signed`.

Team `growth` publishes, with its own Kafka client and its own key, re-run requests of its own
schedule that no CLI would send: 1970 to 9899, and more than the maximum of runs; and one within
the bounds but over its fires-a-minute quota. Each is refused, dead-lettered with its reason and
reported to `growth`, and `payments`' change published after them on the same partition is taken
at once. The request within every bound fires, and the audit owes what the ticker fired.

Then `payments` asks a backfill, deletes and re-creates its schedule, and asks the same backfill
again: the second request's runs have ids of their own, so they fire and the audit holds with no
duplicate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.firing import ScheduleState
from kairos.core.ownership import Team
from kairos.core.quotas import Quota
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.reruns import MAX_BACKFILL_RUNS, rerun_occurrences
from kairos.core.run_id import RERUN_MARK, rerun_id, rerun_request_of
from kairos.core.schedule import Schedule
from kairos.services.ticker.settings import Ownership
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.team_events import publish_team_change
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.dead_letters import QUOTA_EXCEEDED, RERUN_OUT_OF_BOUNDS
from kairos.streams.wire.records import schedule_event_record
from kairos.streams.wire.signing import Signer
from tests.broker.test_team_ownership import _as, _key_file
from tests.broker.test_ticker_failover import committed_runs
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import start_ticker

CODECS = make_codecs()
HOUR = timedelta(hours=1)
SINCE_2020 = datetime(2020, 1, 1, tzinfo=UTC)
GROWTH_FIRES_A_MINUTE = 120
"""30 on each of the 4 partitions: `growth`'s hourly schedule takes 1, re-runs may take 29."""


def _hour() -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


@pytest.fixture
def deployment(kafka_settings: KafkaSettings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    keys = {team: _key_file(tmp_path, team) for team in ("payments", "growth")}
    quotas = {"payments": Quota(), "growth": Quota(max_fires_per_minute=GROWTH_FIRES_A_MINUTE)}
    for team, (_, signer) in keys.items():
        registered = Team(team, (signer.public_key(),), quota=quotas[team])
        publish_team_change(kafka_settings, team, registered, "test-admin")
    ticker = start_ticker(
        kafka_settings, "t1", tmp_path / "t1", tmp_path, ownership=Ownership.SIGNED
    )
    ticker.wait_for_log("teams read: 2")
    yield {"settings": kafka_settings, "keys": keys}
    ticker.kill()


def _send_request(settings: KafkaSettings, request: RerunRequest, signer: Signer) -> None:
    """A re-run request as a team's own client publishes it: on its schedule's partition."""
    topic = settings.layout.name(TopicRole.SCHEDULES)
    key = f"{request.schedule_id}{RERUN_MARK}{request.request_id}".encode()
    value = CODECS.schedule_event.encode(
        schedule_event_record(
            request.schedule_id,
            "rerun_requested",
            None,
            changed_by="growth-script",
            changed_at=request.requested_at,
            reason=None,
            rerun=request,
        )
    )
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    headers = signer.headers(topic, key, value, now_ms)
    producer = Producer(settings.client_config())
    partition = partition_for(request.schedule_id, settings.schedules_partitions)
    producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
    assert producer.flush(30) == 0


def _backfill(request_id: str, schedule_id: str, start: datetime, end: datetime) -> RerunRequest:
    return RerunRequest(
        request_id, schedule_id, RerunKind.BACKFILL, start, end, None, "growth", end, None
    )


def _refusals(settings: KafkaSettings) -> list[dict[str, Any]]:
    topic = settings.layout.name(TopicRole.DEAD_LETTERS)
    return [
        letter
        for _, letter in read_topic(settings.bootstrap_servers, topic, CODECS.dead_letter.decode)
    ]


def _runs_of(settings: KafkaSettings, schedule_id: str) -> list[dict[str, Any]]:
    return [run for run in committed_runs(settings) if run["schedule_id"] == schedule_id]


def _kairos(settings: KafkaSettings, key: Path, *args: str) -> Result:
    root = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix"]
    return CliRunner().invoke(app, [*root, settings.topic_prefix, "--signing-key", str(key), *args])


def _audit_holds(settings: KafkaSettings, key: Path, since: datetime) -> dict[str, Any]:
    until = datetime.now(UTC) - timedelta(seconds=3)
    window = ["--from", since.isoformat(), "--to", until.isoformat(), "--grace", "2s"]
    verified = _kairos(settings, key, "audit", "verify", *window, "--json")
    assert verified.exit_code == 0, verified.output
    report: dict[str, Any] = json.loads(verified.stdout)
    assert report["verdict"] == "holds" and report["duplicates"] == 0, report
    return report


def test_requests_over_the_bounds_or_the_quota_are_refused_and_hold_nothing(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    (payments_key, _), (growth_key, growth) = deployment["keys"].values()
    hour = _hour()
    own = Schedule(id="growth-hourly", every=HOUR, start_at=SINCE_2020, owner="growth")
    home = partition_for(own.id, settings.schedules_partitions)
    neighbour = next(
        f"payments-{n}"
        for n in range(100)
        if partition_for(f"payments-{n}", settings.schedules_partitions) == home
    )
    with SchedulesClient(_as(settings, growth_key), changed_by="growth-ci") as client:
        client.upsert(own)
    flood = _backfill(
        "flood", own.id, datetime(1970, 1, 1, tzinfo=UTC), datetime(9899, 1, 1, tzinfo=UTC)
    )
    too_many = _backfill("too-many", own.id, hour - (MAX_BACKFILL_RUNS + 1) * HOUR, hour - HOUR)
    over_quota = _backfill("over-quota", own.id, hour - 40 * HOUR, hour - HOUR)
    within = _backfill("within", own.id, hour - 10 * HOUR, hour - HOUR)
    for request in (flood, too_many, over_quota, within):
        _send_request(settings, request, growth)
    # payments' schedule, created after the requests on the same partition, is taken at once.
    later = Schedule(id=neighbour, every=timedelta(seconds=1), start_at=hour, owner="payments")
    with SchedulesClient(_as(settings, payments_key), changed_by="payments-ci") as client:
        client.upsert(later)
    eventually(lambda: _runs_of(settings, neighbour), timeout_s=30, message="the partition is held")

    def three() -> list[dict[str, Any]] | None:
        found = _refusals(settings)
        return found if len(found) >= 3 else None

    refused = eventually(three, timeout_s=30, message="the requests were not all refused")
    assert refused is not None
    by_key = {letter["key"].decode().split(RERUN_MARK)[1]: letter for letter in refused}
    assert sorted(by_key) == ["flood", "over-quota", "too-many"], by_key
    assert all(letter["reported_to"] == "growth" for letter in refused)
    assert by_key["flood"]["error_class"] == RERUN_OUT_OF_BOUNDS
    assert "past when it was appended" in by_key["flood"]["reason"]
    assert by_key["too-many"]["error_class"] == RERUN_OUT_OF_BOUNDS
    assert f"more than {MAX_BACKFILL_RUNS} occurrences" in by_key["too-many"]["reason"]
    assert by_key["over-quota"]["error_class"] == QUOTA_EXCEEDED
    assert "asks for 40 runs at once" in by_key["over-quota"]["reason"]
    listed = _kairos(settings, growth_key, "teams", "rejections", "growth", "-o", "json")
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == 3

    state = ScheduleState(own, version=0, next_nominal=None)
    wanted = {
        rerun_id(own.id, nominal, "within") for nominal in rerun_occurrences(state.schedule, within)
    }

    def fired() -> set[str] | None:
        ids = {run["run_id"] for run in _runs_of(settings, own.id) if run["rerun_request_id"]}
        return ids if ids else None

    assert eventually(fired, timeout_s=30) == wanted
    report = _audit_holds(settings, growth_key, hour - 12 * HOUR)
    assert report["reruns"] == len(wanted), report


def test_the_same_backfill_after_a_delete_and_re_create_runs_under_new_ids(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    payments_key, _ = deployment["keys"]["payments"]
    hour = _hour()
    schedule = Schedule(id="payments-nightly", every=HOUR, start_at=SINCE_2020, owner="payments")
    window = ["--from", (hour - 3 * HOUR).isoformat(), "--to", (hour - HOUR).isoformat()]

    def backfill() -> set[str]:
        asked = _kairos(
            settings, payments_key, "schedules", "backfill", schedule.id, *window, "-o", "json"
        )
        assert asked.exit_code == 0, asked.output
        runs = set(json.loads(asked.stdout)["runs"])
        assert len(runs) == 3, runs

        def fired() -> set[str] | None:
            ids = {run["run_id"] for run in _runs_of(settings, schedule.id)}
            return ids if runs <= ids else None

        eventually(fired, timeout_s=30, message="the backfill did not fire")
        return runs

    with SchedulesClient(_as(settings, payments_key), changed_by="payments-ci") as client:
        client.upsert(schedule)
        first = backfill()
        client.delete(schedule.id)
        client.upsert(schedule)
    second = backfill()
    assert first.isdisjoint(second), "the repeated backfill reused the first one's run ids"
    assert {rerun_request_of(run) for run in first} != {rerun_request_of(run) for run in second}
    report = _audit_holds(settings, payments_key, hour - 4 * HOUR)
    assert report["reruns"] == 6, report
