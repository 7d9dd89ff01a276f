"""Jobs see only what is theirs: real shell jobs, run by `run_shell` in this process (the
executor), see nothing of the executor's environment or files, get their own team's secrets and
no other's, never print a secret into a failure reason, and, run as their teams' uids, cannot
read each other's environment."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kairos.services.executor.jobs import ShellJob
from kairos.services.executor.shell_job import missing_capabilities, run_shell
from tests.shell_jobs import (
    TEAM_A,
    TEAM_B,
    failure_of,
    invocation,
    shared_directory,
    wait_for_pid,
)

pytestmark = pytest.mark.local

needs_setuid = pytest.mark.skipif(
    bool(missing_capabilities()), reason="running jobs as other uids needs CAP_SETUID/CAP_SETGID"
)
EXECUTOR_SECRETS = {
    "KAIROS_KAFKA_SASL_PASSWORD": "broker-password-1",
    "KAIROS_DEDUPE_URL": "postgresql://kairos:db-password-2@db/kairos",
    "KAIROS_SIGNING_KEY": "signing-key-3",
}


@pytest.fixture
def executor_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in EXECUTOR_SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def secrets_root(tmp_path: Path) -> Path:
    root = tmp_path / "secrets"
    (root / "payments").mkdir(parents=True)
    (root / "payments" / "token").write_text("payments-token-4711\n")
    (root / "search").mkdir()
    return root


@pytest.mark.usefixtures("executor_environment")
def test_a_job_sees_nothing_of_the_executors_environment() -> None:
    reason = failure_of(
        ShellJob(command='env; echo "password=[$KAIROS_KAFKA_SASL_PASSWORD]"; exit 1'),
        invocation(),
    )
    assert "password=[]" in reason
    assert "KAIROS_RUN_ID=job@payments" in reason
    for name, value in EXECUTOR_SECRETS.items():
        assert name not in reason
        assert value not in reason


@needs_setuid
def test_a_job_of_a_team_with_a_uid_cannot_read_the_executors_files(tmp_path: Path) -> None:
    private = tmp_path / "signing.key"
    private.write_text("executor-only-5\n")
    private.chmod(0o600)
    with shared_directory() as shared:
        copy = shared / "signing.key"
        copy.write_text("executor-only-5\n")
        copy.chmod(0o600)
        reason = failure_of(
            ShellJob(command=f"id -u; cat {copy}; cat {private}"), invocation(user=TEAM_A)
        )
    assert reason.startswith("exit status 1; output: 64001\n")
    assert "Permission denied" in reason
    assert "executor-only-5" not in reason


@needs_setuid
def test_the_home_directory_is_the_teams_own_and_removed_after_the_attempt() -> None:
    with shared_directory() as shared:
        seen = shared / "home"
        run_shell(
            ShellJob(command=f'stat -c "%u:%g %a $HOME $TMPDIR $PWD" "$HOME" > {seen}'),
            invocation(user=TEAM_A),
            4096,
        )
        owner, mode, home, tmpdir, cwd = seen.read_text().split()
    assert (owner, mode) == (TEAM_A, "700")
    assert home == tmpdir == cwd
    assert not Path(home).exists()


def test_a_secret_is_given_to_its_own_teams_job(secrets_root: Path) -> None:
    job = ShellJob(command='[ "$TOKEN" = payments-token-4711 ]', secrets={"TOKEN": "token"})
    run_shell(job, invocation(owner="payments", secrets_root=secrets_root), 4096)


@pytest.mark.parametrize(
    "owner, refusal",
    [
        ("search", "secret 'token' (for TOKEN): the team has no such secret; create"),
        (None, "secret 'token' (for TOKEN): the schedule has no owner"),
    ],
)
def test_another_teams_secret_is_refused_and_the_job_does_not_run(
    secrets_root: Path, tmp_path: Path, owner: str | None, refusal: str
) -> None:
    ran = tmp_path / "ran"
    job = ShellJob(command=f"touch {ran}", secrets={"TOKEN": "token"})
    reason = failure_of(job, invocation(owner=owner, secrets_root=secrets_root))
    assert reason.startswith(refusal)
    assert not ran.exists()


def test_a_secret_is_scrubbed_from_the_failure_reason(secrets_root: Path) -> None:
    job = ShellJob(command='echo "using $TOKEN"; exit 2', secrets={"TOKEN": "token"})
    reason = failure_of(job, invocation(secrets_root=secrets_root))
    assert reason == "exit status 2; output: using [secret]"


def test_a_secret_cut_by_the_output_limit_leaves_no_end_of_it(secrets_root: Path) -> None:
    # The 16-byte tail keeps "ken-4711 and on\n": the value's end, cut where the tail starts.
    job = ShellJob(command='echo "$TOKEN and on"; exit 2', secrets={"TOKEN": "token"})
    reason = failure_of(job, invocation(secrets_root=secrets_root), output_limit=16)
    assert reason == "exit status 2; output: [11 earlier bytes dropped] [secret] and on"


@needs_setuid
def test_a_team_cannot_read_the_environment_of_another_teams_running_job(
    secrets_root: Path,
) -> None:
    with shared_directory() as shared:
        holder = ShellJob(
            command=f"echo $$ > {shared}/pid; while [ ! -e {shared}/done ]; do sleep 0.05; done",
            secrets={"TOKEN": "token"},
        )
        running = threading.Thread(
            target=run_shell,
            args=(holder, invocation(owner="payments", user=TEAM_B, secrets_root=secrets_root)),
            kwargs={"output_limit": 4096},
        )
        running.start()
        try:
            pid = wait_for_pid(shared / "pid")
            reader = ShellJob(command=f"tr '\\0' '\\n' < /proc/{pid}/environ")
            other_team = failure_of(reader, invocation(owner="search", user=TEAM_A))
            # The control: the same read by the job's own uid works, so the refusal above is
            # the uids' doing, not a wrong pid.
            same_team = failure_of(
                ShellJob(command=f"{reader.command}; exit 9"), invocation(user=TEAM_B)
            )
        finally:
            (shared / "done").touch()
            running.join(timeout=30)
    assert "Permission denied" in other_team
    assert "payments-token-4711" not in other_team
    assert "TOKEN=payments-token-4711" in same_team
    assert not running.is_alive()


def test_the_executors_uid_is_the_jobs_without_a_user_in_the_policy(tmp_path: Path) -> None:
    seen = tmp_path / "uid"
    run_shell(ShellJob(command=f"id -u > {seen}"), invocation(user=None), 4096)
    assert seen.read_text().strip() == str(os.geteuid())
