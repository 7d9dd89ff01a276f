"""`kairos executor`: run one executor process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from kairos.cli.options import (
    LogLevelOption,
    fail,
    invalid_settings,
    service_arguments,
    service_kafka_settings,
)
from kairos.cli.settings_options import with_settings
from kairos.core.errors import KairosError
from kairos.core.pools import DEFAULT_POOL
from kairos.services.executor import ExecutorSettings, Handlers, run_executor
from kairos.services.executor.settings import BUILT_IN_KINDS, comma_list
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
        try:
            return comma_list(kinds)
        except ValueError as error:
            raise fail(f"--kinds {error}") from None
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


@with_settings(ExecutorSettings, skip=frozenset({"kinds"}))
def executor(
    context: typer.Context,
    handlers: _HandlersOption = None,
    kinds: _KindsOption = None,
    log_level: LogLevelOption = "INFO",
    **settings: Any,
) -> None:
    """Run fired jobs at least once, deduplicated by run id: retries, overlap, dead letters."""
    logging.getLogger().setLevel(log_level.upper())
    try:
        registry = Handlers.combined(_load_handlers(r) for r in handlers or [])
        kafka = service_kafka_settings(context)
        group_id = settings["group_id"]
        own_group = group_id not in (None, kafka.deployment_id(EXECUTOR_GROUP))
        served = _served_kinds(
            kinds,
            registry,
            own_group=own_group,
            pools=settings["pools"],
            teams=bool(settings["teams"]),
        )
        executor_settings = ExecutorSettings(**settings, kinds=served)
    except ValidationError as invalid:
        raise invalid_settings(invalid) from invalid
    except (ValueError, KairosError) as error:
        raise fail(str(error)) from error
    _run(kafka, executor_settings, registry)


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
