"""How one executor process runs: its identity, its store, its limits and its timings."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kairos.core.pools import DEFAULT_POOL, Pool
from kairos.services.executor.jobs import JOB_KINDS
from kairos.services.executor.runtime_policy import RuntimePolicy
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.streams.dedupe import sqlite_url
from kairos.streams.kafka.settings import EXECUTOR_GROUP, KafkaSettings

BUILT_IN_KINDS = frozenset({"noop", "shell", "http", "kafka"})
"""What `kairos executor` runs by default; `python` needs handlers (see docs/executors.md)."""


def dedupe_store_url(state_dir: Path, dedupe_url: str | None) -> str:
    """The store executors keep their runs in: `dedupe_url`, or SQLite under `state_dir`."""
    return dedupe_url or sqlite_url(state_dir / "dedupe.sqlite3")


class ExecutorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """This executor's unique name: lease owner and `executor_instance` of its events."""
    state_dir: Path
    """Where the embedded SQLite dedupe store lives when `dedupe_url` is not set."""
    dedupe_url: str | None = None
    """`postgresql://…` (executors on many hosts) or `sqlite:////path` (one host)."""
    group_id: str | None = None
    """The executors' consumer group; `None`: the deployment's own, `<topic prefix>executors`."""
    kinds: frozenset[str] = BUILT_IN_KINDS
    """Job kinds this executor runs; runs of other known kinds are left to the executors that
    run them (another consumer group), runs of unknown kinds are dead-lettered."""
    pools: frozenset[Pool] = frozenset({DEFAULT_POOL})
    """The pools whose runs this executor takes (a schedule's `pool`)."""
    teams: frozenset[str] = frozenset()
    """The teams whose runs this executor takes; empty: every team's (a shared executor)."""
    secrets_root: Path | None = None
    """Where a team's secrets are files, `<secrets_root>/<team>/<name>`, resolved at run time."""
    runtime_policy: RuntimePolicy = RuntimePolicy()
    """What each team's jobs run as and may reach (`kairos.services.executor.runtime_policy`)."""
    owner_share: float = Field(default=0.5, gt=0, le=1)
    """The largest part of the pool's running runs one owner may hold while others wait."""
    concurrency: int = Field(default=8, ge=1)
    """Attempts running at once in this process."""
    lease: timedelta = Field(default=timedelta(seconds=30), ge=timedelta(seconds=1))
    """How long an attempt stays this executor's without a renewal; renewed every third of it.
    After a crash, the run is retried elsewhere once its lease expires."""
    poll_interval: timedelta = Field(default=timedelta(milliseconds=200), gt=timedelta(0))
    """The longest the loop waits for records before it looks for due retries and leases."""
    offset_commit_interval: timedelta = Field(default=timedelta(seconds=1), ge=timedelta(0))
    """Consumed offsets are committed at most this often (claims are durable before). Longer
    means fewer commits and more duplicates (suppressed) redelivered after a crash."""
    shutdown_grace: timedelta = Field(default=timedelta(seconds=30), ge=timedelta(0))
    """After SIGTERM, how long running attempts may take to finish before they are stopped."""
    session_timeout_ms: int = Field(default=10_000, ge=500)
    output_limit_bytes: int = Field(default=4096, ge=64)
    """Output of a shell job (its tail) or body of an HTTP response kept for the failure reason."""
    retention: timedelta = Field(default=timedelta(days=90), gt=timedelta(0))
    """How long finished runs are remembered as duplicates: at least the runs topic's retention,
    which the executor checks at start (`fleet.check_retention`)."""
    metrics_host: str = Field(default=DEFAULT_METRICS_HOST, min_length=1)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Where `/metrics`, `/livez` and `/readyz` are served (`kairos.services.probes`); port 0:
    a free one, logged; `None`: no server."""

    @model_validator(mode="after")
    def _known_kinds(self) -> ExecutorSettings:
        unknown = self.kinds - set(JOB_KINDS)
        if unknown:
            raise ValueError(f"unknown job kinds {sorted(unknown)}; known: {sorted(JOB_KINDS)}")
        return self

    def group(self, kafka: KafkaSettings) -> str:
        return self.group_id or kafka.deployment_id(EXECUTOR_GROUP)

    @property
    def store_url(self) -> str:
        return dedupe_store_url(self.state_dir, self.dedupe_url)
