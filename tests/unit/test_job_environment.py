"""A shell job's environment is an allow-list; its secrets are its team's files; what it prints
loses their values. The pure parts of services/executor/shell_job.py and secrets.py."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kairos.services.executor.job_cgroup import unified_hierarchy
from kairos.services.executor.jobs import Invocation, ShellJob
from kairos.services.executor.secrets import (
    SecretUnavailableError,
    resolve_secrets,
    scrub,
    scrub_cut_start,
)
from kairos.services.executor.shell_job import SAFE_PATH, job_environment

pytestmark = pytest.mark.unit

EXECUTOR_ENVIRONMENT = {
    "PATH": "/opt/kairos/bin:/usr/bin",
    "LANG": "de_DE.UTF-8",
    "KAIROS_KAFKA_SASL_PASSWORD": "broker-password",
    "KAIROS_DEDUPE_URL": "postgresql://kairos:db-password@db/kairos",
    "KAIROS_SIGNING_KEY": "signing-key",
    "HOME": "/root",
}


def invocation(owner: str | None = "payments") -> Invocation:
    return Invocation(
        run_id="settle@2027-03-14T07:00:00Z",
        schedule_id="settle",
        owner=owner,
        attempt=2,
        nominal_at=datetime(2027, 3, 14, 7, tzinfo=UTC),
        timeout=timedelta(seconds=10),
        stop=threading.Event(),
        deadline=0.0,
    )


def test_the_environment_holds_the_allow_list_and_nothing_of_the_executors() -> None:
    job = ShellJob(command="settle", env={"REGION": "eu"})
    home = Path("/tmp/kairos-job-x")
    env = job_environment(job, invocation(), home, {"API_TOKEN": "t0ken"}, EXECUTOR_ENVIRONMENT)
    assert env == {
        "PATH": SAFE_PATH,
        "LANG": "de_DE.UTF-8",
        "HOME": str(home),
        "TMPDIR": str(home),
        "REGION": "eu",
        "API_TOKEN": "t0ken",
        "KAIROS_RUN_ID": "settle@2027-03-14T07:00:00Z",
        "KAIROS_SCHEDULE_ID": "settle",
        "KAIROS_ATTEMPT": "2",
        "KAIROS_NOMINAL_AT": "2027-03-14T07:00:00+00:00",
        "KAIROS_EXECUTOR_INSTANCE": "",
        "KAIROS_OWNER": "payments",
    }


def test_without_a_locale_of_the_executor_the_job_gets_c_utf8_and_no_owner_without_one() -> None:
    env = job_environment(ShellJob(command="x"), invocation(None), Path("/h"), {}, {})
    assert env["LANG"] == "C.UTF-8"
    assert "KAIROS_OWNER" not in env


def test_a_job_is_told_its_data_interval_in_utc_and_on_its_schedules_clock() -> None:
    # The fall-back night in New York: a daily 02:00 run's period is 25 hours.
    run = replace(
        invocation(),
        nominal_at=datetime(2027, 11, 7, 7, tzinfo=UTC),
        interval_start=datetime(2027, 11, 6, 6, tzinfo=UTC),
        timezone="America/New_York",
    )
    env = job_environment(ShellJob(command="x"), run, Path("/h"), {}, {})
    assert {k: v for k, v in env.items() if "INTERVAL" in k or k == "KAIROS_TIMEZONE"} == {
        "KAIROS_INTERVAL_START": "2027-11-06T06:00:00+00:00",
        "KAIROS_INTERVAL_END": "2027-11-07T07:00:00+00:00",
        "KAIROS_INTERVAL_START_LOCAL": "2027-11-06T02:00:00-04:00",
        "KAIROS_INTERVAL_END_LOCAL": "2027-11-07T02:00:00-05:00",
        "KAIROS_TIMEZONE": "America/New_York",
    }
    # A run fired before schema history v12 carries no interval: none is made up, and a job's
    # own variables of those names do not pass for one.
    forged = ShellJob(
        command="x", env={"KAIROS_INTERVAL_START": "2000-01-01", "KAIROS_TIMEZONE": "x"}
    )
    env = job_environment(forged, invocation(), Path("/h"), {}, {})
    assert "KAIROS_INTERVAL_START" not in env and "KAIROS_TIMEZONE" not in env


def test_a_zone_this_executor_does_not_know_still_gives_the_interval_in_utc() -> None:
    run = replace(
        invocation(),
        interval_start=datetime(2027, 3, 13, 7, tzinfo=UTC),
        timezone="Mars/Olympus_Mons",
    )
    assert run.interval_fields() == {
        "INTERVAL_START": "2027-03-13T07:00:00+00:00",
        "INTERVAL_END": "2027-03-14T07:00:00+00:00",
    }


def test_a_jobs_env_cannot_pass_for_another_run() -> None:
    job = ShellJob(command="x", env={"KAIROS_RUN_ID": "other", "PATH": "/opt/team/bin"})
    env = job_environment(job, invocation(), Path("/h"), {}, {})
    assert env["KAIROS_RUN_ID"] == "settle@2027-03-14T07:00:00Z"
    assert env["PATH"] == "/opt/team/bin"


@pytest.fixture
def secrets_root(tmp_path: Path) -> Path:
    (tmp_path / "payments").mkdir()
    (tmp_path / "payments" / "token").write_text("payments-token\n")
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "leak").symlink_to(tmp_path / "payments" / "token")
    (tmp_path / "intruders").symlink_to(tmp_path / "payments")
    return tmp_path


def test_a_team_gets_its_own_secret_without_its_trailing_newline(secrets_root: Path) -> None:
    assert resolve_secrets(secrets_root, "payments", {"TOKEN": "token"}) == {
        "TOKEN": "payments-token"
    }


@pytest.mark.parametrize(
    "owner, name, refusal",
    [
        ("search", "token", "the team has no such secret; create"),
        ("search", "../payments/token", "is not a plain file name"),
        ("search", "leak", "resolves outside team 'search''s secrets directory"),
        ("intruders", "token", "resolves outside team 'intruders''s secrets directory"),
        ("../payments", "token", "owner '../payments' is not a plain file name"),
        (None, "token", "the schedule has no owner, and secrets belong to a team"),
    ],
)
def test_a_team_gets_no_other_teams_secret(
    secrets_root: Path, owner: str | None, name: str, refusal: str
) -> None:
    with pytest.raises(SecretUnavailableError) as refused:
        resolve_secrets(secrets_root, owner, {"TOKEN": name})
    assert refused.value.reason.startswith(f"secret {name!r} (for TOKEN): ")
    assert refusal in refused.value.reason
    assert "payments-token" not in refused.value.reason


def test_an_executor_without_a_secrets_root_says_how_to_give_it_one() -> None:
    with pytest.raises(SecretUnavailableError, match="start it with --secrets-root DIR"):
        resolve_secrets(None, "payments", {"TOKEN": "token"})


def test_no_secrets_named_needs_no_secrets_root() -> None:
    assert resolve_secrets(None, None, {}) == {}


def test_scrub_blanks_every_value_longest_first_and_leaves_short_ones() -> None:
    text = "token=abcd1234 again abcd1234 prefix abcd on 1"
    assert scrub(text, ["abcd", "abcd1234", "on"]) == (
        "token=[secret] again [secret] prefix [secret] on 1"
    )


def test_an_output_cut_inside_a_value_loses_the_values_end_too() -> None:
    assert scrub_cut_start("d1234 then abcd1234", ["abcd1234"]) == "[secret] then [secret]"
    assert scrub_cut_start("234 then", ["abcd1234"]) == "234 then"


def test_the_executors_cgroup_is_found_in_the_unified_hierarchy() -> None:
    mounts = "cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"
    own = "1:cpu:/\n0::/system.slice/kairos.service\n"
    assert unified_hierarchy(mounts, own) == Path("/sys/fs/cgroup/system.slice/kairos.service")
    assert unified_hierarchy("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n", own) is None
