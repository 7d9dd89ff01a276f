"""How one executor process runs: its identity, its store, its limits and its timings."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from kairos.core.durations import parse_duration
from kairos.core.pools import DEFAULT_POOL, Pool, pool_name
from kairos.services.executor.jobs import JOB_KINDS
from kairos.services.executor.runtime_policy import RuntimePolicy, load_runtime_policy
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.services.settings_fields import ServiceSettings, Setting
from kairos.streams.dedupe import sqlite_url
from kairos.streams.kafka.settings import EXECUTOR_GROUP, KafkaSettings

BUILT_IN_KINDS = frozenset({"noop", "shell", "http", "kafka"})
"""What `kairos executor` runs by default; `python` needs handlers (see docs/executors.md)."""


def dedupe_store_url(state_dir: Path, dedupe_url: str | None) -> str:
    """The store executors keep their runs in: `dedupe_url`, or SQLite under `state_dir`."""
    return dedupe_url or sqlite_url(state_dir / "dedupe.sqlite3")


def comma_list(text: str) -> frozenset[str]:
    """The items of a comma-separated option, blanks dropped; raises `ValueError` when it names
    none (leaving the option out is how to ask for its default)."""
    items = frozenset(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise ValueError(f"{text!r} names nothing; list names separated by commas")
    return items


def pool_list(text: str) -> frozenset[str]:
    """The pools of `--pool`, each a valid pool name (`PoolNameError` says what to write)."""
    return frozenset(pool_name(pool) for pool in comma_list(text))


_Duration = Setting(parse=parse_duration, metavar="DURATION")


class ExecutorSettings(ServiceSettings):
    """How one executor process runs; `kairos executor` takes each field as an option but
    `kinds`, which it derives from --kinds, --handlers and --group-id."""

    instance: Annotated[str, Setting(env="KAIROS_EXECUTOR_INSTANCE")] = Field(
        min_length=1, pattern=r"^[A-Za-z0-9._-]+$"
    )
    """This executor's unique name: lease owner and `executor_instance` of its events."""
    state_dir: Path
    """Where the embedded SQLite dedupe store lives (without --dedupe-url)."""
    dedupe_url: str | None = None
    """postgresql://user@host:5432/db (executors on many hosts) or sqlite:////path (shared on
    one host)."""
    retention: Annotated[
        timedelta,
        Setting(
            env="KAIROS_DEDUPE_RETENTION",
            flag="--dedupe-retention",
            parse=parse_duration,
            metavar="DURATION",
        ),
    ] = Field(default=timedelta(days=90), gt=timedelta(0))
    """How long finished runs are remembered as duplicates (default 90d): at least the runs
    topic's retention.ms, which the executor checks at start (`fleet.check_retention`)."""
    group_id: Annotated[str | None, Setting(env="KAIROS_EXECUTOR_GROUP")] = None
    """Consumer group of the executors; default: the deployment's, <topic prefix>executors. A
    group of its own (a team's or a pool's executors) needs --kinds, or --handlers alone to run
    python jobs only."""
    kinds: frozenset[str] = BUILT_IN_KINDS
    """Job kinds this executor runs; runs of other known kinds are left to the executors that
    run them (another consumer group), runs of unknown kinds are dead-lettered."""
    pools: Annotated[
        frozenset[Pool],
        Setting(env="KAIROS_EXECUTOR_POOLS", flag="--pool", parse=pool_list, metavar="POOLS"),
    ] = frozenset({DEFAULT_POOL})
    """Comma-separated pools whose runs this executor takes (a schedule's pool; default:
    default); another pool than default needs a --group-id of its own."""
    teams: Annotated[
        frozenset[str], Setting(env="KAIROS_EXECUTOR_TEAMS", parse=comma_list, metavar="TEAMS")
    ] = frozenset()
    """Comma-separated teams whose runs this executor takes; default: every team's. Needs a
    --group-id of its own."""
    secrets_root: Path | None = None
    """Directory of the teams' secrets, one file per secret: <root>/<team>/<name>, resolved at
    run time."""
    runtime_policy: Annotated[
        RuntimePolicy, Setting(parse=lambda text: load_runtime_policy(Path(text)), metavar="FILE")
    ] = RuntimePolicy()
    """YAML file of each team's uid, http egress and kafka topics (docs/executors.md)."""
    owner_share: float = Field(default=0.5, gt=0, le=1)
    """Largest part of the pool's running runs one owner holds while others wait."""
    concurrency: int = Field(default=8, ge=1)
    """Attempts running at once in this process."""
    lease: Annotated[timedelta, _Duration] = Field(
        default=timedelta(seconds=30), ge=timedelta(seconds=1)
    )
    """How long a running attempt stays this executor's unrenewed (default 30s); renewed every
    third of it. After a crash, the run is retried elsewhere once its lease expires."""
    poll_interval: Annotated[timedelta, _Duration] = Field(
        default=timedelta(milliseconds=200), gt=timedelta(0)
    )
    """Longest wait for records per turn of the loop (default 200ms), before it looks for due
    retries and leases."""
    offset_commit_interval: Annotated[timedelta, _Duration] = Field(
        default=timedelta(seconds=1), ge=timedelta(0)
    )
    """Commit consumed offsets at most this often (default 1s; claims are durable before).
    Longer means fewer commits and more duplicates (suppressed) redelivered after a crash."""
    shutdown_grace: Annotated[timedelta, _Duration] = Field(
        default=timedelta(seconds=30), ge=timedelta(0)
    )
    """How long attempts may take to finish after SIGTERM before they are stopped (default
    30s)."""
    session_timeout_ms: int = Field(default=10_000, ge=500)
    """How long a silent executor keeps its partitions."""
    output_limit_bytes: int = Field(default=4096, ge=64)
    """Output of a shell job (its tail) or body of an HTTP response kept for the failure
    reason."""
    metrics_host: str = Field(default=DEFAULT_METRICS_HOST, min_length=1)
    """The address --metrics-port listens on: this host only by default; 0.0.0.0 for every
    interface (a container whose probes and scraper come from outside)."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve /metrics, /livez and /readyz on this port (0: a free one, logged); default: no
    server (`kairos.services.probes`)."""

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
