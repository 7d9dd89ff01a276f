"""`kairos executor`: run one executor process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from kairos.cli.options import (
    DedupeUrlOption,
    ExecutorStateDirOption,
    LogLevelOption,
    MetricsHostOption,
    MetricsPortOption,
    fail,
    invalid_settings,
    service_arguments,
    service_kafka_settings,
)
from kairos.core.durations import parse_duration
from kairos.core.errors import KairosError
from kairos.core.pools import DEFAULT_POOL, pool_name
from kairos.services.executor import ExecutorSettings, Handlers, run_executor
from kairos.services.executor.runtime_policy import RuntimePolicy, load_runtime_policy
from kairos.services.executor.settings import BUILT_IN_KINDS
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.streams.kafka.settings import EXECUTOR_GROUP, KafkaSettings


def _load_handlers(reference: str) -> Handlers:
    """Import `module:attribute`, a `Handlers` registry of a team's python jobs."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise fail(
            f"--handlers {reference!r}: write it as module:attribute, e.g. billing.jobs:handlers"
        )
    try:
        registry = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise fail(f"--handlers {reference!r}: {error}") from error
    if not isinstance(registry, Handlers):
        raise fail(f"--handlers {reference!r} is a {type(registry).__name__}, not Handlers")
    return registry


def _runtime_policy(path: Path | None) -> RuntimePolicy:
    return RuntimePolicy() if path is None else load_runtime_policy(path)


def _listed(text: str) -> frozenset[str]:
    return frozenset(item.strip() for item in text.split(",") if item.strip())


def _served_kinds(
    kinds: str | None, registry: Handlers, *, own_group: bool, pools: frozenset[str], teams: bool
) -> frozenset[str]:
    """The kinds to run. Only the deployment's group runs the built-in kinds unasked: a second
    group that ran them would run every team's shell, http and kafka runs a second time."""
    if not own_group and (pools != {DEFAULT_POOL} or teams):
        # Members of one group split its partitions: runs this member passed over on its
        # partitions would be run by no member of the group.
        raise fail(
            "--pool and --teams need a group of their own: give --group-id (such as "
            f"executors-{min(pools - {DEFAULT_POOL}, default='payments')}) and --kinds. In the "
            "deployment's group, the runs this executor passed over on its partitions would be "
            "run by nobody"
        )
    if kinds is not None:
        return _listed(kinds)
    if not own_group:
        return BUILT_IN_KINDS | ({"python"} if registry.names else set())
    if registry.names:
        logging.getLogger(__name__).info(
            "serving python jobs only (--handlers in a group of its own, without --kinds)"
        )
        return frozenset({"python"})
    raise fail(
        "give --kinds explicitly: a second group serving the built-in kinds would run every "
        "team's shell, http and kafka runs a second time (this executor's --group-id is not "
        "the deployment's). For a pool's executors, --kinds names what that pool runs, such as "
        "--kinds shell"
    )


_InstanceOption = Annotated[
    str, typer.Option(envvar="KAIROS_EXECUTOR_INSTANCE", help="This executor's unique name.")
]

_DedupeRetentionOption = Annotated[
    str,
    typer.Option(
        envvar="KAIROS_DEDUPE_RETENTION",
        help="How long finished runs are remembered as duplicates; at least the runs "
        "topic's retention.ms (checked at start).",
    ),
]

_GroupIdOption = Annotated[
    str | None,
    typer.Option(
        envvar="KAIROS_EXECUTOR_GROUP",
        help="Consumer group of the executors; default: the deployment's, <topic prefix>executors. "
        "A group of its own (a team's or a pool's executors) needs --kinds, or --handlers alone "
        "to run python jobs only.",
        show_default=False,
    ),
]

_HandlersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--handlers",
        help="module:attribute of a Handlers registry of python jobs (repeatable).",
    ),
]

_KindsOption = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated job kinds to run. Default in the deployment's group: "
        "noop,shell,http,kafka, plus python with --handlers; in a group of its own: python with "
        "--handlers, else required (so no second group runs the built-in kinds twice).",
        show_default=False,
    ),
]

_PoolOption = Annotated[
    str,
    typer.Option(
        envvar="KAIROS_EXECUTOR_POOLS",
        help="Comma-separated pools whose runs this executor takes (a schedule's pool); "
        "another pool than default needs a --group-id of its own.",
    ),
]

_TeamsOption = Annotated[
    str | None,
    typer.Option(
        "--teams",
        envvar="KAIROS_EXECUTOR_TEAMS",
        help="Comma-separated teams whose runs this executor takes; default: every team's. "
        "Needs a --group-id of its own.",
        show_default=False,
    ),
]

_SecretsRootOption = Annotated[
    Path | None,
    typer.Option(
        envvar="KAIROS_SECRETS_ROOT",
        help="Directory of the teams' secrets, one file per secret: <root>/<team>/<name>.",
        show_default=False,
    ),
]

_RuntimePolicyOption = Annotated[
    Path | None,
    typer.Option(
        envvar="KAIROS_RUNTIME_POLICY",
        help="YAML file of each team's uid, http egress and kafka topics (docs/executors.md).",
        show_default=False,
    ),
]

_OwnerShareOption = Annotated[
    float,
    typer.Option(help="Largest part of the pool's running runs one owner holds while others wait."),
]

_ConcurrencyOption = Annotated[int, typer.Option(min=1, help="Attempts running at once.")]

_LeaseOption = Annotated[
    str, typer.Option(help="How long a running attempt is this executor's unrenewed.")
]

_ShutdownGraceOption = Annotated[
    str, typer.Option(help="How long attempts may take to finish after SIGTERM.")
]

_OffsetCommitIntervalOption = Annotated[
    str, typer.Option(help="Commit consumed offsets at most this often.")
]

_PollIntervalOption = Annotated[
    str, typer.Option(help="Longest wait for records per turn of the loop.")
]

_SessionTimeoutMsOption = Annotated[
    int,
    typer.Option(
        envvar="KAIROS_SESSION_TIMEOUT_MS",
        help="How long a silent executor keeps its partitions.",
    ),
]


def executor(
    context: typer.Context,
    instance: _InstanceOption,
    state_dir: ExecutorStateDirOption,
    dedupe_url: DedupeUrlOption = None,
    dedupe_retention: _DedupeRetentionOption = "90d",
    group_id: _GroupIdOption = None,
    handlers: _HandlersOption = None,
    kinds: _KindsOption = None,
    pool: _PoolOption = DEFAULT_POOL,
    teams: _TeamsOption = None,
    secrets_root: _SecretsRootOption = None,
    runtime_policy: _RuntimePolicyOption = None,
    owner_share: _OwnerShareOption = 0.5,
    concurrency: _ConcurrencyOption = 8,
    lease: _LeaseOption = "30s",
    shutdown_grace: _ShutdownGraceOption = "30s",
    offset_commit_interval: _OffsetCommitIntervalOption = "1s",
    poll_interval: _PollIntervalOption = "200ms",
    session_timeout_ms: _SessionTimeoutMsOption = 10_000,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST,
    log_level: LogLevelOption = "INFO",
) -> None:
    """Run fired jobs at least once, deduplicated by run id: retries, overlap, dead letters."""
    logging.getLogger().setLevel(log_level.upper())
    try:
        registry = Handlers.combined(_load_handlers(r) for r in handlers or [])
        pools = frozenset(pool_name(p) for p in _listed(pool))
        kafka = service_kafka_settings(context)
        own_group = group_id not in (None, kafka.deployment_id(EXECUTOR_GROUP))
        served = _served_kinds(kinds, registry, own_group=own_group, pools=pools, teams=bool(teams))
        settings = ExecutorSettings(
            instance=instance,
            state_dir=state_dir,
            dedupe_url=dedupe_url,
            retention=parse_duration(dedupe_retention),
            group_id=group_id,
            kinds=served,
            pools=pools,
            teams=_listed(teams or ""),
            secrets_root=secrets_root,
            runtime_policy=_runtime_policy(runtime_policy),
            owner_share=owner_share,
            concurrency=concurrency,
            lease=parse_duration(lease),
            shutdown_grace=parse_duration(shutdown_grace),
            offset_commit_interval=parse_duration(offset_commit_interval),
            poll_interval=parse_duration(poll_interval),
            session_timeout_ms=session_timeout_ms,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
        )
    except ValidationError as invalid:
        raise invalid_settings(invalid) from invalid
    except (ValueError, KairosError) as error:
        raise fail(str(error)) from error
    _run(kafka, settings, registry)


def _run(kafka: KafkaSettings, settings: ExecutorSettings, registry: Handlers) -> None:
    try:
        run_executor(kafka, settings, registry)
    except KairosError as error:
        raise fail(str(error)) from error


def executor_arguments(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    *,
    group_id: str | None = None,
    dedupe_url: str | None = None,
    dedupe_retention: str | None = None,
    handlers: str | None = None,
    kinds: str | None = None,
    pool: str | None = None,
    teams: str | None = None,
    secrets_root: Path | None = None,
    runtime_policy: Path | None = None,
    concurrency: int | None = None,
    lease: str | None = None,
    shutdown_grace: str | None = None,
    offset_commit_interval: str | None = None,
    poll_interval: str | None = None,
    session_timeout_ms: int | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    log_level: str | None = None,
) -> list[str]:
    """The `kairos` arguments of an executor of this deployment (`None`: the flag's default).

    How `kairos dev up` and the tests start one, so they cannot drift apart.
    """
    return service_arguments(
        "executor",
        settings,
        instance,
        state_dir,
        (
            ("--group-id", group_id),
            ("--dedupe-url", dedupe_url),
            ("--dedupe-retention", dedupe_retention),
            ("--handlers", handlers),
            ("--kinds", kinds),
            ("--pool", pool),
            ("--teams", teams),
            ("--secrets-root", secrets_root),
            ("--runtime-policy", runtime_policy),
            ("--concurrency", concurrency),
            ("--lease", lease),
            ("--shutdown-grace", shutdown_grace),
            ("--offset-commit-interval", offset_commit_interval),
            ("--poll-interval", poll_interval),
            ("--session-timeout-ms", session_timeout_ms),
            ("--metrics-port", metrics_port),
            ("--metrics-host", metrics_host),
            ("--log-level", log_level),
        ),
    )
