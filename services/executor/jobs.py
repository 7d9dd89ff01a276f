"""What every job runner shares; the parameters' rules are `kairos.core.job_kinds`'s.

A job is `{"kind": …, …}` in the schedule; `JobSpec` carries the kind and the other fields as
its parameters, which `job_params` validates when a run is admitted, with the rules `kairos apply`
checks before publishing. Each runner (`shell_job`, `http_job`, `kafka_job`) raises
`JobFailedError` with a reason when the attempt fails, returns when it succeeds, and stops early
when the attempt's `stop` event is set (replaced, lease lost, shutdown) or its timeout passes.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kairos.core.errors import KairosError
from kairos.core.job_kinds import (
    JOB_KINDS,
    HttpJob,
    JobParams,
    JobParamsError,
    KafkaJob,
    NoopJob,
    PythonJob,
    ShellJob,
    job_params,
)
from kairos.services.executor.runtime_policy import TeamRuntime

# The parameter models are re-exported: the executor's modules read every job's rules here.
__all__ = [
    "JOB_KINDS",
    "HttpJob",
    "Invocation",
    "JobFailedError",
    "JobParams",
    "JobParamsError",
    "KafkaJob",
    "NoopJob",
    "ProcessGroups",
    "PythonJob",
    "ShellJob",
    "job_params",
    "payload_bytes",
]


class JobFailedError(KairosError):
    """An attempt failed; `reason` says why, for the `failed` event and the dead letter."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ProcessGroups(Protocol):
    """Told of the process group of an attempt's shell job, so that it can be killed from
    outside the worker (the lease lost, the executor paused past it)."""

    def started(self, pgid: int) -> None: ...

    def ended(self, pgid: int) -> None: ...


INTERVAL_FIELDS = (
    "INTERVAL_START",
    "INTERVAL_END",
    "INTERVAL_START_LOCAL",
    "INTERVAL_END_LOCAL",
    "TIMEZONE",
)
"""The names `Invocation.interval_fields` may give, reserved whether a run carries them or not:
a job's own `env` or headers never pass for them."""


@dataclass(frozen=True)
class Invocation:
    """One attempt of one run, as a job runner sees it."""

    run_id: str
    schedule_id: str
    owner: str | None
    """The schedule's owning team (`None` in open ownership without one)."""
    attempt: int
    nominal_at: datetime
    timeout: timedelta
    stop: threading.Event
    """Set when the attempt must stop before it ends by itself."""
    deadline: float
    """`time.monotonic()` value at which the attempt times out."""
    process_groups: ProcessGroups | None = None
    runtime: TeamRuntime = field(default_factory=TeamRuntime)
    """What the owner's jobs run as and may reach here (the executor's runtime policy)."""
    secrets_root: Path | None = None
    """Where the teams' secrets are files (`<secrets_root>/<team>/<name>`); `None`: none."""
    executor_instance: str = ""
    """The executor running the attempt (`KAIROS_EXECUTOR_INSTANCE` of a shell job)."""
    interval_start: datetime | None = None
    """Where the run's data interval starts (it ends at `nominal_at`); `None` for a run fired
    by a release older than schema history v12, which carries none."""
    timezone: str = "UTC"
    """The schedule's zone: the interval is also given on its clock."""

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def interval_fields(self) -> dict[str, str]:
        """The run's data interval as every job kind is given it, by name (`INTERVAL_START`,
        `INTERVAL_END`, their `_LOCAL` forms on the schedule's clock, `TIMEZONE`): none for a run
        that carries no interval."""
        if self.interval_start is None:
            return {}
        start, end = self.interval_start, self.nominal_at
        fields = {"INTERVAL_START": start.isoformat(), "INTERVAL_END": end.isoformat()}
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            # A zone this executor's tz data lacks (older than the ticker's), or a foreign
            # record's: the run still gets its interval, in UTC.
            return fields
        return {
            **fields,
            "INTERVAL_START_LOCAL": start.astimezone(zone).isoformat(),
            "INTERVAL_END_LOCAL": end.astimezone(zone).isoformat(),
            "TIMEZONE": self.timezone,
        }

    def timed_out_reason(self) -> str:
        return f"timed out after {self.timeout.total_seconds():g}s"


def payload_bytes(value: str | dict[str, Any] | list[Any] | None) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()
