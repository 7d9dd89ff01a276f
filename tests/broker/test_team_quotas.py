"""Team quotas against a real ticker: refused deterministically, readable back, after restores.

Team `growth` may hold 8 schedules (a share of 2 on each of the 4 partitions) and `fast` 24
fires a minute (6 on each). Each change over its partition's share is refused by the ticker
(`--ownership signed`), dead-lettered with the reason and reported to the team; what was taken
is exactly the first changes of each partition up to its share, and a ticker restoring the
partitions cold from the changelog judges the same way.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kairos.core.ownership import Team
from kairos.core.quotas import Quota
from kairos.core.schedule import Schedule
from kairos.services.ticker.settings import Ownership
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.readers.team_events import publish_team_change
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.dead_letters import QUOTA_EXCEEDED
from tests.broker.test_team_ownership import _as, _cli, _key_file, _runs_of
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import ServiceProcess, start_ticker

CODECS = make_codecs()
YEARLY = "0 3 1 1 *"


def _start(settings: KafkaSettings, instance: str, tmp_path: Path) -> ServiceProcess:
    ticker = start_ticker(
        settings, instance, tmp_path / instance, tmp_path, ownership=Ownership.SIGNED
    )
    ticker.wait_for_log("teams read: 2")
    # Teams are limited: each partition's use is counted in the turns' spare time, before any
    # change needs a verdict.
    for partition in range(settings.schedules_partitions):
        ticker.wait_for_log(f"quota use of partition {partition} counted")
    return ticker


def _counted_schedules(ticker: ServiceProcess) -> int:
    """How many schedules the ticker's quota counts read from its stores."""
    return sum(
        int(n) for n in re.findall(r"quota use of partition \d+ counted: (\d+)", ticker.log())
    )


@pytest.fixture
def deployment(kafka_settings: KafkaSettings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    keys = {team: _key_file(tmp_path, team) for team in ("growth", "fast")}
    quotas = {"growth": Quota(max_schedules=8), "fast": Quota(max_fires_per_minute=24)}
    for team, quota in quotas.items():
        public = keys[team][1].public_key()
        publish_team_change(kafka_settings, team, Team(team, (public,), quota=quota), "admin")
    state: dict[str, Any] = {"settings": kafka_settings, "keys": keys, "tmp": tmp_path}
    state["ticker"] = _start(kafka_settings, "t1", tmp_path)
    yield state
    state["ticker"].kill()


def _quota_letters(settings: KafkaSettings) -> list[dict[str, Any]]:
    topic = settings.layout.name(TopicRole.DEAD_LETTERS)
    return [
        letter
        for _, letter in read_topic(settings.bootstrap_servers, topic, CODECS.dead_letter.decode)
        if letter["error_class"] == QUOTA_EXCEEDED
    ]


def _refused(settings: KafkaSettings, count: int) -> list[dict[str, Any]]:
    def enough() -> list[dict[str, Any]] | None:
        found = _quota_letters(settings)
        return found if len(found) >= count else None

    found = eventually(enough, timeout_s=60, message=f"fewer than {count} quota refusals")
    assert len(found) == count, [letter["reason"] for letter in found]
    return found


def _held(settings: KafkaSettings, owner: str) -> dict[str, Schedule]:
    snapshot = ScheduleReader(settings, CODECS).read_all()
    return {
        stored.id: stored.schedule
        for stored in snapshot.schedules.values()
        if stored.schedule.owner == owner
    }


def _yearly(schedule_id: str) -> Schedule:
    return Schedule(id=schedule_id, cron=YEARLY, owner="growth")


def _the_cli_shows_the_refusals_and_the_use(
    settings: KafkaSettings,
    growth_key: Path,
    refusals: list[dict[str, Any]],
    missing: str,
    expected: list[str],
) -> None:
    """`teams rejections` lists every refusal, the refused schedule `missing` is described by
    why it is not there, and `teams quota` shows growth's share and its use of `expected`."""
    rejections = _cli(settings, growth_key, "teams", "rejections", "growth", "-o", "json")
    assert rejections.returncode == 0, rejections.stderr
    assert len(json.loads(rejections.stdout)) == len(refusals)
    # The refused schedule's own page says why it is not there.
    described = _cli(settings, growth_key, "schedules", "describe", missing)
    assert described.returncode == 2
    assert "its last change was refused" in described.stderr
    assert "over the quota of team 'growth'" in described.stderr
    shown = _cli(settings, growth_key, "teams", "quota", "growth", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    standing = json.loads(shown.stdout)
    assert standing["share_per_partition"]["schedules"] == 2
    assert standing["use"]["schedules"] == len(expected)
    assert {entry["schedules"] for entry in standing["by_partition"]} == {2}


def test_schedules_over_a_partitions_share_are_refused_the_same_after_a_cold_restore(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    growth_key, _ = deployment["keys"]["growth"]
    partitions = settings.schedules_partitions
    ids = [f"growth-{n:02d}" for n in range(20)]
    expected: list[str] = []
    seen: Counter[int] = Counter()
    for schedule_id in ids:
        partition = partition_for(schedule_id, partitions)
        seen[partition] += 1
        if seen[partition] <= 2:
            expected.append(schedule_id)
    with SchedulesClient(_as(settings, growth_key), changed_by="growth-ci") as client:
        client.upsert_all(_yearly(schedule_id) for schedule_id in ids)

    refusals = _refused(settings, len(ids) - len(expected))
    assert sorted(letter["key"].decode() for letter in refusals) == sorted(set(ids) - set(expected))
    assert {letter["reported_to"] for letter in refusals} == {"growth"}
    assert all("over the quota of team 'growth', 8 schedules" in r["reason"] for r in refusals)
    # Each refused creation's key is restored to nothing: no reader sees what was refused.
    eventually(lambda: sorted(_held(settings, "growth")) == sorted(expected), timeout_s=30)

    missing = sorted(set(ids) - set(expected))[0]
    _the_cli_shows_the_refusals_and_the_use(settings, growth_key, refusals, missing, expected)

    # A full partition takes a creation again once one of its schedules is deleted.
    full = next(p for p, n in seen.items() if n > 2)
    freed = next(s for s in expected if partition_for(s, partitions) == full)
    retried = next(s for s in ids if s not in expected and partition_for(s, partitions) == full)
    with SchedulesClient(_as(settings, growth_key), changed_by="growth-ci") as client:
        client.delete(freed)
        client.upsert(_yearly(retried))
    taken = sorted({*expected, retried} - {freed})
    eventually(lambda: sorted(_held(settings, "growth")) == taken, timeout_s=30)

    # A ticker restoring every partition cold from the changelog counts the same use: the
    # refused are refused again, and an edit that takes nothing more is taken.
    deployment["ticker"].kill()
    shutil.rmtree(deployment["tmp"] / "t2", ignore_errors=True)
    deployment["ticker"] = _start(settings, "t2", deployment["tmp"])
    assert _counted_schedules(deployment["ticker"]) == len(taken), "counted from the restore"
    again = [s for s in ids if s not in taken][:3]
    edited = _yearly(taken[0]).model_copy(update={"description": "edited over a full share"})
    with SchedulesClient(_as(settings, growth_key), changed_by="growth-ci") as client:
        client.upsert_all([*(_yearly(s) for s in again), edited])
    later = _refused(settings, len(refusals) + len(again))
    assert sorted(letter["key"].decode() for letter in later[len(refusals) :]) == sorted(again)
    eventually(
        lambda: _held(settings, "growth").get(taken[0]) == edited,
        timeout_s=30,
        message="an edit within the quota was not taken after the restore",
    )
    assert sorted(_held(settings, "growth")) == taken


def test_a_change_over_the_fires_a_minute_share_is_refused_and_the_schedule_fires_as_it_was(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    fast_key, _ = deployment["keys"]["fast"]
    partitions = settings.schedules_partitions
    names = [f"fast-{n:02d}" for n in range(40)]
    first = names[0]
    home = partition_for(first, partitions)
    beside = next(n for n in names[1:] if partition_for(n, partitions) == home)
    elsewhere = next(n for n in names if partition_for(n, partitions) != home)
    start = datetime.now(UTC).replace(microsecond=0)

    def every(schedule_id: str, seconds: int) -> Schedule:
        return Schedule(
            id=schedule_id, every=timedelta(seconds=seconds), start_at=start, owner="fast"
        )

    with SchedulesClient(_as(settings, fast_key), changed_by="fast-ci") as client:
        client.upsert(every(first, 10))  # 6 a minute: the partition's whole share
        client.upsert(every(first, 5))  # 12: refused
        client.upsert(every(beside, 30))  # 2 more on the same partition: refused
        client.upsert(every(elsewhere, 10))  # another partition's share: taken
    refusals = _refused(settings, 2)
    assert [letter["key"].decode() for letter in refusals] == [first, beside]
    assert all("team 'fast', 24 fires a minute" in letter["reason"] for letter in refusals)
    assert "would take 12 (now 6)" in refusals[0]["reason"]
    taken = {first: every(first, 10), elsewhere: every(elsewhere, 10)}
    eventually(lambda: _held(settings, "fast") == taken, timeout_s=30)
    described = _cli(settings, fast_key, "schedules", "describe", first, "-o", "json")
    assert described.returncode == 0, described.stderr
    refused_here = json.loads(described.stdout)["last_refused_changes"]
    assert [r["reported_to"] for r in refused_here] == ["fast"]
    assert "would take 12 (now 6)" in refused_here[0]["reason"]
    # It fires every 10 s as it was taken, not every 5 s as refused.
    eventually(lambda: len(_runs_of(settings, first)) >= 2, timeout_s=60)
    nominals = [run["nominal_at"] for run in _runs_of(settings, first)]
    assert all((n - start) % timedelta(seconds=10) == timedelta(0) for n in nominals), nominals
    # Slower is always taken, over the quota or not.
    with SchedulesClient(_as(settings, fast_key), changed_by="fast-ci") as client:
        client.upsert(every(first, 60))
    eventually(lambda: _held(settings, "fast")[first] == every(first, 60), timeout_s=30)
    assert len(_quota_letters(settings)) == 2


def test_an_administrator_sets_lowers_and_keeps_a_quota_from_the_cli(
    deployment: dict[str, Any],
) -> None:
    settings: KafkaSettings = deployment["settings"]
    growth_key, growth = deployment["keys"]["growth"]

    def listed() -> dict[str, Any]:
        shown = _cli(settings, growth_key, "teams", "list", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        return {team["team"]: team for team in json.loads(shown.stdout)}

    lowered = _cli(settings, growth_key, "teams", "set-quota", "growth", "--max-schedules", "4")
    assert lowered.returncode == 0, lowered.stderr
    assert "at most 4 schedules, no limit of fires a minute" in lowered.stdout
    # Re-registering the keys keeps the quota.
    public = base64.b64encode(growth.public_key()).decode()
    put = _cli(settings, growth_key, "teams", "put", "growth", "--public-key", public)
    assert put.returncode == 0, put.stderr
    assert listed()["growth"]["max_schedules"] == 4
    wrong = _cli(settings, growth_key, "teams", "set-quota", "growth", "--max-schedules", "many")
    assert wrong.returncode != 0 and "give a whole number" in wrong.stderr
    huge = _cli(
        settings, growth_key, "teams", "set-quota", "growth", "--max-fires-per-minute", "3000000000"
    )
    assert huge.returncode != 0 and "from 0 to 2147483647" in huge.stderr, huge.stderr
    unknown = _cli(settings, growth_key, "teams", "set-quota", "nobody", "--max-schedules", "1")
    assert unknown.returncode != 0 and "not registered" in unknown.stderr
    lifted = _cli(settings, growth_key, "teams", "set-quota", "growth", "--max-schedules", "none")
    assert lifted.returncode == 0, lifted.stderr
    assert listed()["growth"]["max_schedules"] is None
