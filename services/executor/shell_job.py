"""`shell` jobs: a command run by `/bin/sh -c` as its team's user, seeing only what is its own.

Each attempt gets a supervisor process (`job_supervisor`, in a session of its own, in the
attempt's cgroup where the host allows one) that starts the shell in a process group of its own
and ends every process the job started, daemonised ones included, before it reports the shell's
status. The job's environment is built from an allow-list (`job_environment`): nothing of the
executor's own environment reaches it, and its secrets are resolved at run time for its owner
only (`secrets`). With the runtime policy's `user` for the owner, the shell runs as that uid and
gid, without supplementary groups, in a home directory of its own removed after the attempt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kairos.core.errors import KairosError
from kairos.services.executor import job_supervisor
from kairos.services.executor.job_cgroup import AttemptCgroup
from kairos.services.executor.jobs import INTERVAL_FIELDS, Invocation, JobFailedError, ShellJob
from kairos.services.executor.runtime_policy import RuntimePolicy, TeamRuntime
from kairos.services.executor.secrets import resolve_secrets, scrub, scrub_cut_start

logger = logging.getLogger(__name__)

_KILL_GRACE_S = 2.0
"""How long a shell job has between SIGTERM and SIGKILL when it must stop."""
_SUPERVISOR_MARGIN_S = 3.0
"""How much longer than the grace the supervisor may take to end the job before it is killed."""
_SUPERVISOR = Path(job_supervisor.__file__)
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The job's PATH unless its `env` sets one: never the executor's, which may lead to its tools."""
_LOCALE_VARIABLES = ("LANG", "LC_ALL")
_NEEDED_CAPABILITIES = {6: "CAP_SETGID", 7: "CAP_SETUID"}
"""Bit in /proc/self/status's CapEff → the capability that running jobs as another user needs."""


class RuntimeCapabilityError(KairosError):
    """The runtime policy runs jobs as other users, and this executor may not switch to them."""


def check_runtime_capability(policy: RuntimePolicy) -> None:
    """Raise `RuntimeCapabilityError` when the policy names users and the executor lacks the
    capabilities to run jobs as them; the executor calls it at start, before any run."""
    users = {team: runtime.user for team, runtime in policy.teams.items() if runtime.user}
    if policy.default.user:
        users["(default)"] = policy.default.user
    missing = missing_capabilities()
    if users and missing:
        named = ", ".join(f"{team} as {user}" for team, user in sorted(users.items()))
        raise RuntimeCapabilityError(_lacking(missing, f"the runtime policy runs jobs of {named}"))


def missing_capabilities() -> list[str]:
    """The capabilities to switch users that this process lacks (none for a full root)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return [] if os.geteuid() == 0 else sorted(_NEEDED_CAPABILITIES.values())
    effective = next(
        int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapEff:")
    )
    return [name for bit, name in sorted(_NEEDED_CAPABILITIES.items()) if not effective >> bit & 1]


def _lacking(missing: list[str], what: str) -> str:
    return (
        f"{what}, but this executor lacks {' and '.join(missing)}: run it as root, grant it "
        "CAP_SETUID and CAP_SETGID (systemd: AmbientCapabilities=; Kubernetes: "
        "securityContext.capabilities.add), or remove `user` from the runtime policy"
    )


def job_environment(
    job: ShellJob,
    invocation: Invocation,
    home: Path,
    secrets: Mapping[str, str],
    executor_environment: Mapping[str, str],
) -> dict[str, str]:
    """The job's whole environment: an allow-list, never a copy of the executor's (which holds
    the broker's and the store's credentials). The run's variables come last: a job's `env`
    cannot pass for another run."""
    locale = {
        name: executor_environment[name]
        for name in _LOCALE_VARIABLES
        if name in executor_environment
    }
    run = {
        "KAIROS_RUN_ID": invocation.run_id,
        "KAIROS_SCHEDULE_ID": invocation.schedule_id,
        "KAIROS_ATTEMPT": str(invocation.attempt),
        "KAIROS_NOMINAL_AT": invocation.nominal_at.isoformat(),
        "KAIROS_EXECUTOR_INSTANCE": invocation.executor_instance,
        **{f"KAIROS_{name}": value for name, value in invocation.interval_fields().items()},
    }
    if invocation.owner is not None:
        run["KAIROS_OWNER"] = invocation.owner
    given = {
        name: value
        for name, value in {**job.env, **secrets}.items()
        if name not in _RESERVED_INTERVAL
    }
    return {
        "PATH": SAFE_PATH,
        **(locale or {"LANG": "C.UTF-8"}),
        "HOME": str(home),
        "TMPDIR": str(home),
        **given,
        **run,
    }


_RESERVED_INTERVAL = frozenset(f"KAIROS_{name}" for name in INTERVAL_FIELDS)
"""Never a job's own: a run without an interval (fired before v12) is given none, not a job's."""


def runtime_user(runtime: TeamRuntime) -> tuple[int, int] | None:
    """The (uid, gid) the policy runs the team's jobs as; `None`: the executor's own."""
    if runtime.user is None:
        return None
    uid, gid = runtime.user.split(":")
    return int(uid), int(gid)


class _OutputTail:
    """Keeps the last `limit` bytes of a stream read on its own thread, so a chatty job can
    neither fill the pipe (and block) nor the executor's memory."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._kept = 0
        self._total = 0
        self._limit = limit
        # The tail may be read while the reader still appends (a supervisor that was killed
        # before its job's processes were).
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        with stream:
            while chunk := os.read(stream.fileno(), 65536):
                with self._lock:
                    self._total += len(chunk)
                    self._chunks.append(chunk)
                    self._kept += len(chunk)
                    while self._kept - len(self._chunks[0]) >= self._limit:
                        self._kept -= len(self._chunks.popleft())

    def text(self, wait_s: float, secrets: list[str]) -> str:
        """The tail, with the job's secret values blanked (a value cut at its start too)."""
        self._thread.join(wait_s)
        with self._lock:
            tail = b"".join(self._chunks)[-self._limit :]
            total = self._total
        text = tail.decode(errors="replace")
        if total > len(tail):
            return f"[{total - len(tail)} earlier bytes dropped] " + (
                scrub_cut_start(text, secrets).strip()
            )
        return scrub(text, secrets).strip()


@dataclass
class _Supervised:
    """What the supervisor reported of one attempt."""

    process: subprocess.Popen[bytes]
    pgid: int | None = None
    status: str | None = None
    """`exit N` or `signal N`, the shell's; `None` when the supervisor ended without one."""
    problem: str = ""


def run_shell(job: ShellJob, invocation: Invocation, output_limit: int) -> None:
    user = runtime_user(invocation.runtime)
    missing = missing_capabilities() if user is not None else []
    if missing:
        raise JobFailedError(
            _lacking(missing, f"team {invocation.owner}'s jobs run as {invocation.runtime.user}")
        )
    secrets = resolve_secrets(invocation.secrets_root, invocation.owner, job.secrets)
    with _attempt_home(user) as home:
        spec = {
            "command": job.command,
            "env": job_environment(job, invocation, home, secrets, os.environ),
            "cwd": str(home),
            "user": user,
            "grace_s": _KILL_GRACE_S,
        }
        stopped_because, supervised, output = _supervise(spec, invocation, output_limit)
    text = output.text(wait_s=_KILL_GRACE_S, secrets=list(secrets.values()))
    logger.debug(
        "run=%s attempt=%d shell %s output=%r",
        invocation.run_id,
        invocation.attempt,
        supervised.status,
        text,
    )
    if stopped_because is not None:
        raise JobFailedError(f"{stopped_because}; output: {text}" if text else stopped_because)
    status = _described_status(supervised)
    if status is not None:
        raise JobFailedError(f"{status}; output: {text}" if text else status)


def _described_status(supervised: _Supervised) -> str | None:
    """Why the attempt failed, in the words of the shell's status; `None`: it succeeded."""
    if supervised.pgid is None:
        return f"the shell did not start: {supervised.problem or 'its supervisor ended first'}"
    if supervised.status is None:
        code = supervised.process.returncode
        if code < 0:
            # The supervisor itself was killed, and the job with it.
            return f"killed by signal {-code}"
        return f"the job's supervisor failed (exit status {code}): {supervised.problem}"
    kind, number = supervised.status.split()
    if kind == "signal":
        return f"killed by signal {number}"
    return None if number == "0" else f"exit status {number}"


@contextlib.contextmanager
def _attempt_home(user: tuple[int, int] | None) -> Iterator[Path]:
    """HOME, TMPDIR and working directory of one attempt: the job's user's alone, removed after,
    so nothing of an attempt is left for the next (or another team's) job to read."""
    home = Path(tempfile.mkdtemp(prefix="kairos-job-"))
    try:
        if user is not None:
            os.chown(home, *user)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if home.exists():
            logger.warning("could not remove the job's home directory %s", home)


def _supervise(
    spec: Mapping[str, object], invocation: Invocation, output_limit: int
) -> tuple[str | None, _Supervised, _OutputTail]:
    """Run the job under its supervisor until it ends or must stop; returns why it was stopped
    (`None`: it ended by itself), what the supervisor reported, and the output."""
    cgroup = AttemptCgroup.create()
    process = subprocess.Popen(
        [sys.executable, "-I", str(_SUPERVISOR), str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": SAFE_PATH},
        start_new_session=True,
    )
    if cgroup is not None and not cgroup.add(process.pid):
        cgroup = None
    assert process.stdout is not None
    output = _OutputTail(process.stdout, output_limit)
    supervised = _Supervised(process)
    stopped_because = None
    try:
        _hand_over(spec, supervised)
        if supervised.pgid is not None and invocation.process_groups is not None:
            invocation.process_groups.started(supervised.pgid)
        stopped_because = _wait(supervised, invocation)
    finally:
        _end(supervised, cgroup)
        if supervised.pgid is not None and invocation.process_groups is not None:
            invocation.process_groups.ended(supervised.pgid)
    return stopped_because, supervised, output


def _hand_over(spec: Mapping[str, object], supervised: _Supervised) -> None:
    """Give the supervisor the job (on a pipe: a command line is public) and learn the shell's
    process group, or why the shell did not start."""
    process = supervised.process
    assert process.stdin is not None and process.stderr is not None
    with contextlib.suppress(BrokenPipeError), process.stdin:
        process.stdin.write(json.dumps(spec).encode())
    first = process.stderr.readline().decode(errors="replace").strip()
    if first.startswith("pgid "):
        supervised.pgid = int(first.split()[1])
    else:
        supervised.problem = first.removeprefix("error ")


def _wait(supervised: _Supervised, invocation: Invocation) -> str | None:
    """Wait for the supervisor; on timeout or request, have it stop the job. Returns why the job
    was stopped, if so."""
    process = supervised.process
    while True:
        try:
            process.wait(timeout=min(0.1, invocation.remaining_s()) or 0.001)
            return None
        except subprocess.TimeoutExpired:
            pass
        if invocation.stop.is_set():
            reason = "stopped before it ended"
        elif invocation.remaining_s() <= 0:
            reason = invocation.timed_out_reason()
        else:
            continue
        # The supervisor sends SIGTERM to everything of the job, then SIGKILL after the grace.
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_KILL_GRACE_S + _SUPERVISOR_MARGIN_S)
        return reason


def _end(supervised: _Supervised, cgroup: AttemptCgroup | None) -> None:
    """The supervisor has ended, or is made to; what it could not end is ended here."""
    process = supervised.process
    if process.poll() is None:
        process.kill()
        process.wait()
    assert process.stderr is not None
    with process.stderr:
        report = process.stderr.read().decode(errors="replace").split("\n")
    supervised.status = next(
        (line for line in report if line.startswith(("exit ", "signal "))), None
    )
    if supervised.status is None:
        # A supervisor's own failure is a traceback: its last line says what went wrong.
        supervised.problem = next((line for line in reversed(report) if line.strip()), "")
    if supervised.status is None and supervised.pgid is not None:
        # Killed before it could end the job: its process group, at least, ends here.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(supervised.pgid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.close()
