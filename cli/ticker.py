"""`kairos ticker`: run one ticker process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from pydantic import ValidationError

from kairos.cli.options import (
    LogLevelOption,
    MetricsHostOption,
    MetricsPortOption,
    fail,
    invalid_settings,
    service_arguments,
    service_kafka_settings,
)
from kairos.core.clock import DEFAULT_MAX_CLOCK_AHEAD_MS
from kairos.core.errors import KairosError
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.services.ticker.service import Ticker
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.state.state_store import DEFAULT_STORE_MEMORY_MB

_InstanceOption = Annotated[
    str, typer.Option(envvar="KAIROS_TICKER_INSTANCE", help="This ticker's unique name.")
]

_StateDirOption = Annotated[
    Path,
    typer.Option(
        envvar="KAIROS_STATE_DIR", help="Where the RocksDB stores of owned partitions live."
    ),
]

_GroupIdOption = Annotated[
    str | None,
    typer.Option(
        envvar="KAIROS_TICKER_GROUP",
        help="Consumer group of the tickers; default: the deployment's, <topic prefix>tickers.",
        show_default=False,
    ),
]

_SessionTimeoutMsOption = Annotated[
    int,
    typer.Option(
        envvar="KAIROS_SESSION_TIMEOUT_MS",
        help="How long a silent ticker keeps its partitions before another takes over.",
    ),
]

_MaxClockAheadMsOption = Annotated[
    int,
    typer.Option(
        envvar="KAIROS_MAX_CLOCK_AHEAD_MS",
        help="How far ahead of the broker's clock this host's may be before the ticker "
        "refuses to fire (its fires would start early).",
    ),
]

_StateStoreMemoryOption = Annotated[
    int,
    typer.Option(
        envvar="KAIROS_STATE_STORE_MEMORY_MB",
        help="Megabytes RocksDB may hold in memory for all this ticker's partition stores "
        "together (block cache and memtables; at least 8).",
    ),
]

_OwnershipOption = Annotated[
    Ownership,
    typer.Option(
        envvar="KAIROS_OWNERSHIP",
        help="signed: take a schedule change only when a registered team that may make it "
        "signed it (docs/teams.md); open: take every change (one team, or a trusted few).",
    ),
]

_OwnershipFromOption = Annotated[
    Ownership | None,
    typer.Option(
        envvar="KAIROS_OWNERSHIP_FROM",
        help="The mode the deployment is switching from: take over partitions last committed "
        "in it too. Without it a ticker refuses (exit 2) a partition last committed in another "
        "mode than --ownership; drop it once `kairos partitions` shows every partition in the "
        "new mode.",
        show_default=False,
    ),
]

_SignatureMaxAgeOption = Annotated[
    float,
    typer.Option(
        envvar="KAIROS_SIGNATURE_MAX_AGE_S",
        min=1,
        help="With --ownership signed: seconds a change's signing may lie from when the broker "
        "appended it; a record replayed later is refused.",
    ),
]


def ticker(
    context: typer.Context,
    instance: _InstanceOption,
    state_dir: _StateDirOption,
    group_id: _GroupIdOption = None,
    session_timeout_ms: _SessionTimeoutMsOption = 10_000,
    max_clock_ahead_ms: _MaxClockAheadMsOption = DEFAULT_MAX_CLOCK_AHEAD_MS,
    state_store_memory_mb: _StateStoreMemoryOption = DEFAULT_STORE_MEMORY_MB,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST,
    ownership: _OwnershipOption = Ownership.OPEN,
    ownership_from: _OwnershipFromOption = None,
    signature_max_age_s: _SignatureMaxAgeOption = 300,
    log_level: LogLevelOption = "INFO",
) -> None:
    """Own schedules partitions and fire their due occurrences in fenced transactions."""
    logging.getLogger().setLevel(log_level.upper())
    try:
        settings = TickerSettings(
            instance=instance,
            state_dir=state_dir,
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            max_clock_ahead_ms=max_clock_ahead_ms,
            state_store_memory_mb=state_store_memory_mb,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            ownership=ownership,
            ownership_from=ownership_from,
            signature_max_age_s=signature_max_age_s,
        )
        service = Ticker(service_kafka_settings(context), settings)
    except ValidationError as invalid:
        raise invalid_settings(invalid) from invalid
    except (ValueError, KairosError) as error:
        raise fail(str(error)) from error
    stop = threading.Event()

    def request_stop(signum: int, _: FrameType | None) -> None:
        logging.getLogger(__name__).info("signal %d: stopping after the open transaction", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        service.run(stop)
    except KairosError as error:
        raise fail(str(error)) from error


def ticker_arguments(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    *,
    session_timeout_ms: int | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    log_level: str | None = None,
    group_id: str | None = None,
    ownership: Ownership | None = None,
    signature_max_age_s: float | None = None,
) -> list[str]:
    """The `kairos` arguments of a ticker of this deployment (`None`: the flag's default).

    How `kairos dev up`, the tests and the benchmarks start one, so they cannot drift apart.
    """
    return service_arguments(
        "ticker",
        settings,
        instance,
        state_dir,
        (
            ("--group-id", group_id),
            ("--session-timeout-ms", session_timeout_ms),
            ("--metrics-port", metrics_port),
            ("--metrics-host", metrics_host),
            ("--log-level", log_level),
            ("--ownership", None if ownership is None else ownership.value),
            ("--signature-max-age-s", signature_max_age_s),
        ),
    )
